"""Runs INSIDE an attack worker process (tests/unit/adversary/test_isolation.py): what could lead to the truth?

Importable by the spawned worker because pytest puts tests/helpers on sys.path (pyproject.toml: pythonpath) and
the worker inherits sys.path. It is handed what to look for (the run directory, a digest of the training
images) only after the attacks ran, and leaves its own arguments out of the search.
"""

from __future__ import annotations

import gc
import hashlib
import os
import sys
import warnings
from pathlib import Path, PurePath

TRUTH_CLASSES = {"GroundTruthStore", "RunStore", "LeakageScorer", "Federation", "ImageDataset", "Truth"}


def _digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def find_the_truth(payloads: list[bytes], run_dir: str, train_nbytes: int, train_digest: str) -> list[str]:
    """Every route from this worker to the run directory or the training images; [] when there is none.

    ``payloads``: the jobs this worker was sent (as ``AttackJob.to_bytes``), searched once deserialised."""
    import numpy as np
    import torch

    from adversary.workers import AttackJob

    jobs = [AttackJob.from_bytes(payload) for payload in payloads]  # what the worker was given, as run_job reads it
    found: list[str] = []
    own = {id(run_dir), id(train_digest), id(payloads), id(found), *map(id, payloads)}

    cwd = Path.cwd().resolve()
    if cwd == Path(run_dir).resolve() or Path(run_dir).resolve() in cwd.parents:
        found.append(f"working directory {cwd} is the run directory")
    for name in ("ground_truth", "partitions.json"):
        if Path(name).exists():
            found.append(f"'{name}' is reachable from the working directory {cwd}")
    found += [f"environment variable {key}" for key, value in os.environ.items() if run_dir in value]
    found += [f"sys.argv: {arg}" for arg in sys.argv if run_dir in arg]
    load = sys.modules.get("fedsim.data.load")
    if load is not None and len(load._CACHE):
        found.append(f"fedsim.data.load._CACHE holds {len(load._CACHE)} data set(s)")

    def where(holder: object, obj: object) -> str:
        if isinstance(holder, dict):
            keys = [key for key, value in holder.items() if value is obj]
            return f"dict (key {keys[:1]})"
        return type(holder).__name__

    def inspect(obj: object, holder: object) -> None:
        if id(obj) in own:
            return
        if isinstance(obj, str):
            if run_dir in obj:
                found.append(f"a string held by {where(holder, obj)}: {obj[:200]!r}")
        elif isinstance(obj, PurePath):
            if run_dir in str(obj):
                found.append(f"a path held by {type(holder).__name__}: {obj}")
        elif type(obj).__name__ in TRUTH_CLASSES:
            found.append(f"a {type(obj).__name__} held by {type(holder).__name__}")
        elif (
            isinstance(obj, np.ndarray)
            and obj.nbytes == train_nbytes
            and _digest(np.ascontiguousarray(obj).tobytes()) == train_digest
        ):
            found.append(f"the training images, as an array held by {type(holder).__name__}")
        elif (
            isinstance(obj, torch.Tensor)
            and obj.numel() * obj.element_size() == train_nbytes
            and _digest(obj.detach().cpu().contiguous().numpy().tobytes()) == train_digest
        ):
            found.append(f"the training images, as a tensor held by {type(holder).__name__}")

    # Everything the garbage collector tracks in this process (module globals, the job's views and options,
    # caches), and everything those objects hold, strings and arrays included.
    heap = gc.get_objects()
    seen: set[int] = set()
    with warnings.catch_warnings():  # type checks on deprecated module attributes warn
        warnings.simplefilter("ignore")
        for holder in [*jobs, *heap]:
            if id(holder) in own or holder is heap:
                continue
            for obj in [holder, *gc.get_referents(holder)]:
                if id(obj) not in seen:
                    seen.add(id(obj))
                    inspect(obj, holder)
    assert all(job.views for job in jobs), "the probe looked at a job without views"
    return sorted(set(found))
