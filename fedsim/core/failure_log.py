"""Where a failure's traceback goes, so that the console gets one line that points to it instead.

A command that fails for a reason outside the user's input (a full disk, a read-only folder, a bug) says so in one
line; the traceback behind it, which the line leaves out, is written to a log file in the temporary folder (not
the run directory: a full or read-only disk is often the very reason). Writing it is best effort: where even that
fails, the line stands alone.
"""

from __future__ import annotations

import os
import tempfile
import time
import traceback
from pathlib import Path


def write_failure_log(error: BaseException, command: str) -> Path | None:
    """Write ``error``'s traceback to ``$TMPDIR/fedsim-<command>-<time>-<pid>.log``; its path, or None when it
    could not be written."""
    name = f"fedsim-{command}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    path = Path(tempfile.gettempdir()) / name
    text = "".join(traceback.format_exception(error))
    try:
        with open(path, "x") as handle:  # "x": never through a link or over a file planted under that name
            handle.write(text)
    except OSError:
        return None
    return path


def pointer_to(log: Path | None) -> str:
    """The clause a one-line error ends with: where its traceback is (nothing when it could not be written)."""
    return f" (traceback in {log})" if log is not None else ""
