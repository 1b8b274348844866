"""The command line's own output: its log handler and the transient status shown while heavy imports happen."""

from __future__ import annotations

import contextlib
import logging
import sys

from rich.console import Console
from rich.logging import RichHandler

from fedsim.core.notices import warnings_as_log_lines


def setup_logging(quiet: bool) -> None:
    """fedsim's log lines on stderr: plain lines with ``quiet``, else rich's; warnings as one log line each."""
    handler: logging.Handler
    if quiet:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    else:
        handler = RichHandler(console=Console(stderr=True), show_path=False)
    logger = logging.getLogger("fedsim")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    warnings_as_log_lines()  # one line each, no echo of the source line that warned


def status(text: str, quiet: bool) -> contextlib.AbstractContextManager[object]:
    """A transient spinner with ``text`` on stderr while the block runs, where stderr is a terminal."""
    console = Console(stderr=True)
    if quiet or not console.is_terminal:
        return contextlib.nullcontext()
    return console.status(text)
