"""Deterministic seeds derived from the experiment seed.

Every random choice in a run (model init, client sampling, each client's local shuffling and dropout)
draws from its own seed derived from ``(experiment seed, purpose, round, client)``. Nothing depends on
the order in which Ray schedules clients, which is what makes ``--resume`` reproduce an uninterrupted run.
"""

from __future__ import annotations

import zlib

import numpy as np


def derive_seed(seed: int, purpose: str, *parts: int) -> int:
    """A 32-bit seed for one purpose, independent of every other purpose."""
    entropy = [seed, zlib.crc32(purpose.encode()), *parts]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def rng(seed: int, purpose: str, *parts: int) -> np.random.Generator:
    return np.random.default_rng(derive_seed(seed, purpose, *parts))
