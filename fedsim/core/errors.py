"""The errors every layer may raise; imports nothing of the project."""


class TrainingFailed(RuntimeError):
    """A run played its rounds but none of them updated the global model (its rows are all kept)."""


class ConfigError(ValueError):
    """A configuration problem, already phrased as one line for the user."""


class ExternalFailure(RuntimeError):
    """What fedsim starts but does not control failed (Ray's start, an audited app's code): the message is one line,
    naming the log that holds the details."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or a stop signal ended the work cleanly; ``signum`` (None: not known) sets the exit status."""

    def __init__(self, message: str = "interrupted", signum: int | None = None) -> None:
        super().__init__(message)
        self.signum = signum


class RunInterrupted(Interrupted):
    """A run stopped by Ctrl-C or a stop signal (``signum``; None: not known) in round ``round``, uncommitted.

    ``run_dir``: the directory to resume, None when the run had committed nothing (and left no directory);
    ``round`` None: every round was committed, the stop came while attacks on them still ran.
    """

    def __init__(self, run_dir: object | None, signum: int | None = None, round: int | None = None) -> None:
        where = f"in round {round}" if round is not None else "while attacks on the last rounds ran"
        if run_dir is None:
            message = "interrupted before the first round; nothing to resume"
        else:
            message = f"interrupted {where}; resume with `fedsim run --resume {run_dir}`"
        super().__init__(message, signum)
        self.run_dir, self.round = run_dir, round


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (library errors run over paragraphs), or its type's name."""
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
