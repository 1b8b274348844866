"""Whether the report's folder can be written, asked before anything is computed or written into it; and the
error a folder that cannot be reported on raises (``fedsim.reporting.ReportError``).

A run directory on a read-only mount (or one the user may not write) is read fine; its report cannot go beside it.
Trying a temporary file tells, whatever the reason (a read-only file system, permissions, a full disk): root
writes through permission bits, so only an attempt says what will happen.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from fedsim.rundir.refused_writes import WRITE_FAILURES


class ReportError(ValueError):
    """The folder cannot be reported on (no run in it, a run with nothing evaluated yet, or not writable)."""


def check_writable(root: Path, out: Path) -> None:
    """Create ``out`` (the report folder of ``root``) when missing and try a file in it; ReportError in one line
    saying why that failed (the system's words) and what to do."""
    try:
        out.mkdir(exist_ok=True)
        with tempfile.TemporaryFile(dir=out, prefix=".fedsim-probe-"):
            pass
    except OSError as error:
        if error.errno not in WRITE_FAILURES:
            raise
        raise ReportError(
            f"report: cannot write '{out}' ({error.strerror or error}); copy {root} to a folder you can write and "
            "run `fedsim report` on the copy"
        ) from None
