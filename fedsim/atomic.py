"""Atomic file writes: a reader (or a run resumed after kill -9) sees the old file or the new one, never half.

The payload goes to a temporary file in the target's folder (so the rename stays on one file system),
unique to this writer (two processes writing the same target never share it), and is renamed over the
target with ``os.replace``. With ``durable=True`` the data is fsynced before the rename, for the files
whose presence commits something (a round's checkpoint): after a crash the renamed file is complete.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def write_atomic(path: Path, write: Callable[[IO[bytes]], None], *, durable: bool = False) -> None:
    """Call ``write(handle)`` on a fresh temporary file beside ``path``, then rename it to ``path``."""
    path = Path(path)
    handle = tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False)
    try:
        with handle:
            write(handle)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


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
