"""The errors every layer may raise; imports nothing of the project."""


class TrainingFailed(RuntimeError):
    """A run played its rounds but none of them updated the global model (its rows are all kept)."""


class ConfigError(ValueError):
    """A configuration problem, already phrased as one line for the user."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (or a stop signal) while a run played its rounds: ``run_dir`` is the directory to resume."""

    def __init__(self, run_dir: object) -> None:
        super().__init__(f"interrupted; resume with `fedsim run --resume {run_dir}`")
        self.run_dir = run_dir


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (library errors run over paragraphs), or its type's name."""
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
