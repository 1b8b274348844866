"""Whether the report's folder can be written, asked before anything is computed or written into it.

A run directory on a read-only mount (or one the user may not write) is read fine; its report cannot go beside it.
Trying a temporary file tells, whatever the reason (a read-only file system, permissions, a full disk): root
writes through permission bits, so only an attempt says what will happen.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from fedsim.rundir.refused_writes import WRITE_FAILURES


def unwritable(folder: Path) -> str | None:
    """Create ``folder`` when missing and try a file in it; why that failed (the system's words), or None."""
    try:
        folder.mkdir(exist_ok=True)
        with tempfile.TemporaryFile(dir=folder, prefix=".fedsim-probe-"):
            pass
    except OSError as error:
        if error.errno not in WRITE_FAILURES:
            raise
        return error.strerror or str(error)
    return None
