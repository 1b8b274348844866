"""The `fedsim` command line: run, audit, validate, sweep, config-schema, list, vulnerability, prior, report.

``main`` parses the arguments (``parser``), runs the command's function (one module per command or group of
commands: ``run``, ``audit``, ``sweep``, ``config_commands``, ``listing``, ``diagnostics``, ``report``) and turns
what it raises into one line and an exit status. Importing the package imports none of torch, Flower, Ray or
pandas: each command imports what it needs when it runs, so that a config error is said at once.
"""

from __future__ import annotations

import argparse
import gc
import signal
import sys
from typing import NoReturn

from fedsim.cli.console import setup_logging
from fedsim.cli.parser import build_parser
from fedsim.cli.run import run_command
from fedsim.core.command_signals import ReportInterrupted, sigterm_interrupts
from fedsim.core.errors import ConfigError, ExternalFailure, RunInterrupted, TrainingFailed
from fedsim.core.stopping import exit_status

__all__ = ["COUNT_OPTIONS", "build_parser", "check_counts", "entry", "main"]

#: errors of the user's input that modules define: (module, class name)
MODULE_USER_ERRORS = (
    ("fedsim.data", "DataError"),
    ("fedsim.models", "ModelError"),
    ("fedsim.reporting", "ReportError"),
    ("fedsim.judge.metrics", "LpipsRequiredError"),
    ("fedsim.engine.deployment.submit", "DeploymentError"),
)


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors caused by the user's input, not our bugs: shown as one line, exit code 2.

    A module's error can only have been raised once the module is imported: those not imported yet are left
    out rather than imported here, so that a one-line error does not wait for the report's pandas and matplotlib.
    """
    defined = [
        getattr(sys.modules[module], name)
        for module, name in MODULE_USER_ERRORS
        if module in sys.modules and hasattr(sys.modules[module], name)
    ]
    return (ConfigError, FileNotFoundError, FileExistsError, *defined)


#: options that count something (steps, threads, runs, CPUs, images, rounds): 1 or more when given
COUNT_OPTIONS = ("rounds", "parallel", "cpus", "projections", "samples", "image_size", "steps", "threads")


def check_counts(args: argparse.Namespace) -> None:
    """One line for the first count below 1 (``--steps 0`` once trained the preset's 3,000 steps)."""
    for name in COUNT_OPTIONS:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} = {value}; allowed: 1 or more")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(getattr(args, "quiet", False))
    try:
        check_counts(args)
        return args.func(args)
    except _user_errors() as error:
        print(f"fedsim: error: {error}", file=sys.stderr)
        return 2
    except TrainingFailed as error:  # the run and its rows exist; it could not train
        print(f"fedsim: error: the run could not train: {error}", file=sys.stderr)
        return 1
    except ExternalFailure as error:  # Ray's start, an audited app: one line naming the log with the details
        print(f"fedsim: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as interrupt:
        print(f"fedsim: {_interrupted(args, interrupt)}", file=sys.stderr)
        return exit_status(getattr(interrupt, "signum", None) or signal.SIGINT)
    except OSError as error:
        from fedsim.core.failure_log import pointer_to, write_failure_log
        from fedsim.rundir.refused_writes import WRITE_FAILURES, refused_write_line

        if error.errno not in WRITE_FAILURES:
            raise
        # the line says what failed and what to do; the traceback behind it goes to a log, not the console
        log = write_failure_log(error, args.command)
        line = refused_write_line(error, args.command, getattr(args, "resume", None), getattr(args, "run_dir", None))
        print(f"fedsim: error: {line}{pointer_to(log)}", file=sys.stderr)
        return 1


def _interrupted(args: argparse.Namespace, interrupt: KeyboardInterrupt) -> str:
    """What Ctrl-C leaves: the run directory to resume when there is one, never a placeholder."""
    if isinstance(interrupt, RunInterrupted | ReportInterrupted):  # it said where it stopped and what is left
        return str(interrupt)
    run_dir = getattr(args, "resume", None)
    if args.func is not run_command:
        return "interrupted"
    if run_dir is not None:
        return f"interrupted; resume with `fedsim run --resume {run_dir}`"
    if args.engine == "deployment":  # the SuperLink's run may go on: its directory is on that machine
        return "interrupted"
    return "interrupted before the first round; nothing to resume"


def entry() -> NoReturn:
    """The ``fedsim`` command: ``main``, then an exit that skips the interpreter's last garbage collection.

    A run leaves a large heap behind (torch, Ray, Flower): walking it on the way out kept the process, with
    nothing left to do, alive for seconds after its last line. Nothing in it needs collecting: every file is
    written and closed, every child process stopped, before ``main`` returns."""
    sigterm_interrupts()  # SIGTERM where no run handles it: one line and 143, as Ctrl-C, not killed without a word
    status = main()
    gc.freeze()
    sys.exit(status)
