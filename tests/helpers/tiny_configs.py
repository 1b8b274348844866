"""The one small config the tests build their runs from: each test states only what it changes.

    tiny_config(seed=4, data={"max_train_samples": 4}, adversary={"attacks": [{"name": "dlg"}]})
    parse_config(merged(TRAINING, name="dp", strategy={"dp": {...}}))   # a federation that trains

A keyword names a top-level section (or ``seed``, ``name``...); a mapping is merged into the base's
mapping key by key (recursively), anything else (a list, a number) replaces the base's value.
"""

from __future__ import annotations

import copy
from typing import Any

from fedsim.config import ExperimentConfig, parse_config

#: two clients of the bundled digits, one round of one step on one image each, DLG's LeNet (uniform init):
#: the smallest federation an attack can run against.
TINY: dict[str, Any] = {
    "seed": 1,
    "device": "cpu",
    "data": {"dataset": "digits", "normalize": "none"},
    "model": {"name": "lenet", "init": "uniform"},
    "federation": {"num_clients": 2, "rounds": 1},
    "client": {"lr": 0.1, "batch_size": 1, "local_steps": 1},
}


def merged(base: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """A copy of ``base`` with ``overrides`` merged in (mappings key by key, anything else replaced)."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], **value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def tiny_raw(**overrides: Any) -> dict[str, Any]:
    """The tiny config as a raw mapping (for YAML files and sweeps), with ``overrides`` merged in."""
    return merged(TINY, **overrides)


def tiny_config(**overrides: Any) -> ExperimentConfig:
    """The tiny config, validated, with ``overrides`` merged in."""
    return parse_config(tiny_raw(**overrides))


#: the tiny config grown into a federation that learns: three clients, two rounds of 5 steps of 16 images
#: on the whole of digits (non-IID), LeNet with ReLU and its default init; extend it with ``merged``.
TRAINING = tiny_raw(
    seed=3,
    data={"partition": {"name": "dirichlet", "alpha": 1.0}, "normalize": "global"},
    model={"activation": "relu", "init": "default"},
    federation={"num_clients": 3, "rounds": 2},
    client={"lr": 0.05, "momentum": 0.9, "batch_size": 16, "local_steps": 5},
)
