"""Atomic file writes: a reader (or a run resumed after kill -9) sees the old file or the new one, never half.

The payload goes to a temporary file in the target's folder (so the rename stays on one file system),
unique to this writer (two processes writing the same target never share it), and is renamed over the
target with ``os.replace``. With ``durable=True`` the data is fsynced before the rename and the folder
after it, for the files whose presence commits something (a round's checkpoint): after a crash or a
power loss the renamed file is there and complete.

Every writer of a run or sweep directory passes ``root=`` (or calls ``inside``): a path that, symlinks
followed, leads outside that directory is refused in one line, before anything is written. The rename would
replace a symlinked file, but a symlinked folder on the way would still lead outside, so the resolved path
is what is checked.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, NoReturn

from fedsim.core.errors import ConfigError


class OutsideDirectory(ConfigError):
    """A write whose path leads outside the run or sweep directory it belongs to (through a symlink or ``..``)."""


def leaves(root: Path, path: Path) -> str | None:
    """How ``path`` leads outside ``root`` once symlinks are followed, as words; None when it stays inside."""
    root, path = Path(root), Path(path)
    base = root.resolve()
    resolved = path.resolve()
    if resolved == base or base in resolved.parents:
        return None
    # name the symlink that leads out, the one the user has to remove (the first from the root down)
    if path.is_relative_to(root):
        step = root
        for part in path.relative_to(root).parts:
            step = step / part
            if step.is_symlink():
                target = step.resolve()
                if target != base and base not in target.parents:
                    return f"'{step}' is a symlink to '{os.readlink(step)}', outside '{root}'"
    return f"it resolves to '{resolved}', outside '{root}'"


def inside(root: Path, path: Path) -> Path:
    """``path``, when it lies inside ``root`` with symlinks followed; OutsideDirectory (one line) otherwise."""
    how = leaves(root, path)
    if how is not None:
        raise OutsideDirectory(f"refusing to write '{path}': {how}")
    return Path(path)


def write_atomic(
    path: Path,
    write: Callable[[IO[bytes]], object],
    *,
    durable: bool = False,
    root: Path | None = None,
    before_rename: Callable[[Path], None] | None = None,
) -> None:
    """Call ``write(handle)`` on a fresh temporary file beside ``path``, then rename it to ``path``.

    ``root``: the directory ``path`` must stay inside (see ``inside``). ``before_rename(temporary)``: called
    with the complete (and, if ``durable``, synced) temporary file just before the rename, e.g. to record its
    checksum; when it raises, nothing is renamed.
    """
    path = Path(path) if root is None else inside(root, path)
    # opened here, closed by the `with` below: its name is needed after it is closed (rename or cleanup)
    handle = tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False)  # noqa: SIM115
    try:
        with handle:
            write(handle)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        if before_rename is not None:
            before_rename(Path(handle.name))
        os.replace(handle.name, path)
    except OSError as error:
        Path(handle.name).unlink(missing_ok=True)
        _raise_naming(error, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
    if durable:
        fsync_directory(path.parent)


def _raise_naming(error: OSError, path: Path) -> NoReturn:
    """Re-raise ``error``; a write that failed for want of space names the file it was writing (the kernel's
    error names none), so that the command line can say which disk is full."""
    if error.errno == errno.ENOSPC and error.filename is None:
        raise OSError(errno.ENOSPC, error.strerror or os.strerror(errno.ENOSPC), str(path)) from error
    raise error


def fsync_directory(folder: Path) -> None:
    """Make a rename (or a new file) in ``folder`` durable: the directory entry is data too."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def append_line_durably(path: Path, line: str, *, root: Path | None = None) -> None:
    """Append ``line`` (ending in a newline) as one write and fsync it; a failed write (disk full) is cut
    back to the file's previous length, so a torn line can never run into the next row. ``root``: as for
    ``write_atomic``."""
    if root is not None:
        inside(root, path)
    data = line.encode()
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        before = os.fstat(descriptor).st_size
        try:
            written = os.write(descriptor, data)
            if written != len(data):
                raise OSError(f"short write to {path}: {written} of {len(data)} bytes")
            os.fsync(descriptor)
        except BaseException as error:
            os.ftruncate(descriptor, before)
            if isinstance(error, OSError):
                _raise_naming(error, path)
            raise
    finally:
        os.close(descriptor)


def write_bytes_atomic(path: Path, data: bytes, *, durable: bool = False, root: Path | None = None) -> None:
    write_atomic(path, lambda handle: handle.write(data), durable=durable, root=root)


def write_text_atomic(path: Path, text: str, *, durable: bool = False, root: Path | None = None) -> None:
    write_bytes_atomic(path, text.encode(), durable=durable, root=root)


def write_json_atomic(
    path: Path, payload: Any, *, durable: bool = False, root: Path | None = None, **dumps: Any
) -> None:
    """``payload`` as JSON (``dumps`` passed to ``json.dumps``, e.g. ``indent=2``)."""
    write_text_atomic(path, json.dumps(payload, **dumps), durable=durable, root=root)


def save_torch_atomic(
    path: Path,
    obj: Any,
    *,
    durable: bool = False,
    root: Path | None = None,
    before_rename: Callable[[Path], None] | None = None,
) -> None:
    """``obj`` as ``torch.save`` writes it. It is serialized in memory first and written as plain bytes: torch's zip
    writer turns a full disk into ``RuntimeError: [enforce fail at inline_container.cc]``, which says neither
    which file nor why; a plain write fails with ``OSError(ENOSPC)`` naming the file (``_raise_naming``)."""
    import io

    import torch  # only the callers that save tensors pay for the import

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    payload = buffer.getbuffer()
    write_atomic(path, lambda handle: handle.write(payload), durable=durable, root=root, before_rename=before_rename)
