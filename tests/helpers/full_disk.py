"""A disk that fills up, for the writers of fedsim.core.atomic: every write to a new file fails with ENOSPC, as the
kernel reports it (no file name), and torch's zip writer fails as it does on a real full disk."""

from __future__ import annotations

import errno
import os
import tempfile

import torch

ZIP_WRITER_ON_A_FULL_DISK = "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"


class _FullDiskFile:
    """A temporary file whose writes fail for want of space (everything else is the real file's)."""

    def __init__(self, real) -> None:
        self._real = real
        self.name = real.name

    def write(self, data) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self._real, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self._real.close()


def fill_the_disk_for_atomic_writes(monkeypatch) -> None:
    """From now on every atomic write (fedsim.core.atomic) fails for want of space; torch.save straight into such a
    file fails as torch's C++ zip writer does there, with a RuntimeError that says neither file nor reason."""
    real_temporary, real_save = tempfile.NamedTemporaryFile, torch.save

    def temporary(*args, **kwargs):
        return _FullDiskFile(real_temporary(*args, **kwargs))

    def save(obj, target, *args, **kwargs):
        if isinstance(target, _FullDiskFile):
            raise RuntimeError(ZIP_WRITER_ON_A_FULL_DISK)
        return real_save(obj, target, *args, **kwargs)

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", temporary)
    monkeypatch.setattr(torch, "save", save)
