"""A real malicious pickle: unpickled without ``weights_only``, it creates a file (the proof that code ran)."""

from __future__ import annotations

from pathlib import Path

import torch


class CreatesFile:
    """Unpickling this calls ``open(path, "w")``: any callable a pickle names runs the same way."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def save_malicious(path: Path, sentinel: Path, **tensors: torch.Tensor) -> None:
    """A torch file that looks like a state dict (``tensors``) plus one entry that creates ``sentinel``."""
    torch.save({**tensors, "payload": CreatesFile(sentinel)}, path)


def assert_really_malicious(tmp_path: Path) -> None:
    """The payload does create its file when loaded unsafely: the tests' 'no file' is evidence, not luck."""
    probe, sentinel = tmp_path / "probe.pt", tmp_path / "probe-ran"
    save_malicious(probe, sentinel)
    torch.load(probe, weights_only=False)
    assert sentinel.exists()
    sentinel.unlink()
