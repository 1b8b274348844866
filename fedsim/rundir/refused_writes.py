"""A write the operating system refused (a full disk, a read-only or foreign folder), said in one line.

The line names the file, the reason, and how to carry on: the ``--resume`` of the run or sweep the file belongs to
(found from the file's own folders), or for ``fedsim report`` a copy to report on.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from fedsim.rundir.layout import CONFIG_FILE, METRICS_FILE, SWEEP_MANIFEST

#: what the operating system says when a folder cannot take a write: full, over quota, read-only, not ours
WRITE_FAILURES = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


def refused_write_line(error: OSError, command: str, resume: Path | None, report_of: Path | None) -> str:
    """A write the operating system refused, in one line: the file, why, and how to carry on.

    ``command``: the fedsim command that failed; ``resume``: its ``--resume`` folder; ``report_of``: what
    ``fedsim report`` was reporting."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return _disk_full(error, command, resume)
    where = f" '{error.filename}'" if error.filename else ""
    reason = error.strerror or (os.strerror(error.errno) if error.errno is not None else str(error))
    if command == "report":
        return (
            f"report: cannot write{where} ({reason}); copy {report_of} to a folder you can write and run "
            "`fedsim report` on the copy"
        )
    return f"cannot write{where} ({reason}); make that folder writable (or choose another output.dir) and try again"


def _disk_full(error: OSError, command: str, resume: Path | None) -> str:
    """A full disk in one line: the file being written, and how to carry on once there is space."""
    written = f" writing {error.filename}" if error.filename else ""
    folders = Path(error.filename).parents if error.filename else ()
    if command == "sweep":  # the sweep resumes every unfinished point, the one that filled the disk too
        sweep_dir = next((folder for folder in folders if (folder / SWEEP_MANIFEST).is_file()), resume)
        if sweep_dir is not None:
            return f"no space left on device{written}; free space and resume with `fedsim sweep --resume {sweep_dir}`"
    run_dir = next(
        (folder for folder in folders if (folder / CONFIG_FILE).is_file() and (folder / METRICS_FILE).is_file()),
        resume if command == "run" else None,
    )
    how = f"resume with `fedsim run --resume {run_dir}`" if run_dir is not None else "run the command again"
    return f"no space left on device{written}; free space and {how}"
