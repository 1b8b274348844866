"""Atomic file writes: a reader (or a run resumed after kill -9) sees the old file or the new one, never half.

The payload goes to a temporary file in the target's folder (so the rename stays on one file system),
unique to this writer (two processes writing the same target never share it), and is renamed over the
target with ``os.replace``. With ``durable=True`` the data is fsynced before the rename and the folder
after it, for the files whose presence commits something (a round's checkpoint): after a crash or a
power loss the renamed file is there and complete.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, NoReturn


def write_atomic(path: Path, write: Callable[[IO[bytes]], None], *, durable: bool = False) -> None:
    """Call ``write(handle)`` on a fresh temporary file beside ``path``, then rename it to ``path``."""
    path = Path(path)
    # opened here, closed by the `with` below: its name is needed after it is closed (rename or cleanup)
    handle = tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False)  # noqa: SIM115
    try:
        with handle:
            write(handle)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
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


def append_line_durably(path: Path, line: str) -> None:
    """Append ``line`` (ending in a newline) as one write and fsync it; a failed write (disk full) is cut
    back to the file's previous length, so a torn line can never run into the next row."""
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


def write_bytes_atomic(path: Path, data: bytes, *, durable: bool = False) -> None:
    write_atomic(path, lambda handle: handle.write(data), durable=durable)


def write_text_atomic(path: Path, text: str, *, durable: bool = False) -> None:
    write_bytes_atomic(path, text.encode(), durable=durable)


def write_json_atomic(path: Path, payload: Any, *, durable: bool = False, **dumps: Any) -> None:
    """``payload`` as JSON (``dumps`` passed to ``json.dumps``, e.g. ``indent=2``)."""
    write_text_atomic(path, json.dumps(payload, **dumps), durable=durable)


def save_torch_atomic(path: Path, obj: Any, *, durable: bool = False) -> None:
    import torch  # only the callers that save tensors pay for the import

    write_atomic(path, lambda handle: torch.save(obj, handle), durable=durable)
