"""Claiming a run directory for a new run, and giving it back when the run ends before it committed anything.

fedsim never deletes what it did not create. A named run directory (``output.run_name``, a sweep's point) must
be new, or an existing folder that is empty (a ``run.lock`` left by fedsim aside): a folder holding anything
else is refused, so the user's files never end up inside a run that may be removed. Giving a directory back
(a new run stopped or refused before round 0 was committed) removes only the entries fedsim writes, by their
names in ``fedsim.rundir.layout``, and the folder itself only when fedsim made it; what is left then never
blocks a retry of the same name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from fedsim.core.atomic import inside
from fedsim.core.errors import ConfigError
from fedsim.rundir.layout import (
    BACKLOG_DIR,
    CHECKPOINT_DIR,
    CLIENT_ERROR_LOG,
    CLIENT_STATE_DIR,
    COMMITS_FILE,
    CONFIG_FILE,
    ENVIRONMENT_FILE,
    FINGERPRINT_FILE,
    GROUND_TRUTH_DIR,
    METRICS_FILE,
    PARTITIONS_FILE,
    RECONSTRUCTIONS_DIR,
    REPORT_DIR,
    RUN_LOCK_FILE,
    SUMMARY_FILE,
)
from fedsim.rundir.lock import RunLock

#: every entry a run directory can hold that fedsim wrote (files, and folders whose content is all fedsim's)
FEDSIM_FILES = (
    CONFIG_FILE,
    FINGERPRINT_FILE,
    ENVIRONMENT_FILE,
    METRICS_FILE,
    COMMITS_FILE,
    SUMMARY_FILE,
    PARTITIONS_FILE,
    CLIENT_ERROR_LOG,
)
FEDSIM_FOLDERS = (CHECKPOINT_DIR, RECONSTRUCTIONS_DIR, GROUND_TRUTH_DIR, BACKLOG_DIR, CLIENT_STATE_DIR, REPORT_DIR)


@dataclass
class Claim:
    """A run directory this process holds the lock of; ``created``: fedsim made the folder (it was not there)."""

    run_dir: Path
    lock: RunLock
    created: bool


def claim_named(run_dir: Path, what: str) -> Claim:
    """Lock ``run_dir`` for a new run and create its metrics file; refused in one line starting with ``what`` when
    another process writes it (naming it), when it already holds a run, or when it holds files of the user's."""
    run_dir = Path(run_dir)
    created = _make_folder(run_dir, what)
    # a folder with a metrics file (or a link planted as one) holds a run: told apart below, once locked
    if not created and not os.path.lexists(run_dir / METRICS_FILE):
        foreign = sorted(entry.name for entry in run_dir.iterdir() if entry.name != RUN_LOCK_FILE)
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise FileExistsError(
                f"{what}: '{run_dir}' already exists and holds files that are not a fedsim run ({shown}); "
                "a new run goes into a new or empty folder: choose another name"
            )
    lock = RunLock.acquire(run_dir, what)  # a run still writing it is named, not told to --resume
    try:
        create_empty(run_dir, METRICS_FILE)
    except FileExistsError:
        lock.release()
        raise FileExistsError(
            f"{what}: '{run_dir}' already holds a run; use `fedsim run --resume {run_dir}` or another name"
        ) from None
    except BaseException:
        lock.release()
        raise
    return Claim(run_dir, lock, created)


def claim_timestamped(parent: Path, name: str) -> Claim:
    """Create and lock ``parent/name`` (or ``name-2``, ``name-3``, ...) that no one else holds; mkdir is the lock."""
    run_dir = claim_new_directory(parent, name)
    lock = RunLock.acquire(run_dir, "the run directory")
    try:
        create_empty(run_dir, METRICS_FILE)
    except BaseException:
        lock.release()
        raise
    return Claim(run_dir, lock, created=True)


def claim_new_directory(parent: Path, name: str) -> Path:
    """Create ``parent/name`` (or ``name-2``, ``name-3``, ...) that no one else holds; mkdir is the lock."""
    parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, 10_000):
        candidate = parent / (name if attempt == 1 else f"{name}-{attempt}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"output.dir: no free run directory named {name}-N left in '{parent}'")


def give_back(run_dir: Path, created: bool) -> None:
    """Remove what fedsim wrote into ``run_dir`` (its named files and folders, their temporary files), then the
    folder itself when fedsim made it and nothing else is left in it. Call with the directory's lock held."""
    run_dir = Path(run_dir)
    for name in FEDSIM_FOLDERS:
        folder = run_dir / name
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)
        elif folder.is_symlink():
            folder.unlink()  # the link only, never what it points to
    for entry in list(run_dir.iterdir()) if run_dir.is_dir() else ():
        if (entry.name in FEDSIM_FILES and entry.name != METRICS_FILE) or _is_temporary_of(entry.name):
            entry.unlink(missing_ok=True)
    # the metrics file last: a kill -9 half-way leaves a run that never committed (what a kill before round 0
    # leaves too), never files that look like the user's; the lock file after it, once nothing else is left
    (run_dir / METRICS_FILE).unlink(missing_ok=True)
    (run_dir / RUN_LOCK_FILE).unlink(missing_ok=True)
    if created:
        with contextlib.suppress(OSError):  # something fedsim did not write appeared in it: left to the user
            run_dir.rmdir()


def remove_stale_temporaries(run_dir: Path) -> None:
    """Remove what a writer killed mid-write left: the temporary files of fedsim's own files and checkpoints
    (``.round_0002.pt.<random>.tmp`` after a kill -9 between a round's commit line and its rename). Call with the
    directory's lock held: no other writer has them open then."""
    run_dir = Path(run_dir)
    checkpoints = run_dir / CHECKPOINT_DIR
    stale = [entry for entry in run_dir.iterdir() if _is_temporary_of(entry.name)]
    if checkpoints.is_dir() and not checkpoints.is_symlink():
        stale += [entry for entry in checkpoints.glob(".round_*.pt.*.tmp") if entry.is_file()]
    for entry in stale:
        entry.unlink(missing_ok=True)


def _is_temporary_of(name: str) -> bool:
    """A temporary file of fedsim.core.atomic's for one of fedsim's files (``.config.yaml.<random>.tmp``)."""
    return name.startswith(".") and name.endswith(".tmp") and any(name.startswith(f".{f}.") for f in FEDSIM_FILES)


def _make_folder(run_dir: Path, what: str) -> bool:
    """Create ``run_dir`` (and its parents); True when this call created it, False when it was there."""
    try:
        run_dir.mkdir(parents=True)
    except FileExistsError:
        if not run_dir.is_dir():
            raise ConfigError(f"{what}: '{run_dir}' is a file, not a folder") from None
        return False
    return True


def create_empty(run_dir: Path, name: str) -> None:
    """Create ``run_dir/name`` empty, exclusively: FileExistsError when it exists (a symlink included: O_EXCL
    creates nothing through one), OutsideDirectory (one line) when it is a symlink leading outside the run."""
    path = inside(run_dir, run_dir / name)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
