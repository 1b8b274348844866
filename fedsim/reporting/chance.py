"""Whether a model learned anything: its test accuracy against the constant predictor's.

A model that always answers the test set's most frequent class reaches the majority-class rate. Measured on the
``n`` images of the test set, that rate has a 95 % Wilson score interval; a model whose final accuracy lies at or
below that interval's upper end is no better than the constant predictor on this test set: it never learned.
Its "accuracy drop" against another run and its leakage trade-off mean nothing, so the frontier flags it and keeps
it off the Pareto front (a DP-SGD run at chance accuracy otherwise sits on the front with an accuracy drop near 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy import stats

if TYPE_CHECKING:
    from fedsim.config import ExperimentConfig

CONFIDENCE = 0.95


@dataclass(frozen=True)
class ChanceLevel:
    """The constant predictor's test accuracy (``majority_rate``) and its Wilson interval over ``samples`` images."""

    majority_rate: float
    low: float
    high: float
    samples: int

    def never_learned(self, accuracy: float) -> bool:
        """True when ``accuracy`` is within (or below) the constant predictor's interval."""
        return bool(accuracy <= self.high)

    def text(self) -> str:
        return f"{self.majority_rate:.3f} [{self.low:.3f}, {self.high:.3f}] on {self.samples} test images"


def chance_from_labels(labels: np.ndarray) -> ChanceLevel:
    """The chance level of a test set from its labels (per-token targets: over the tokens, padding's -100 left out)."""
    labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    labels = labels[labels >= 0]
    samples = len(labels)
    if samples == 0:
        raise ValueError("chance level: the test set is empty")
    majority = int(np.bincount(np.asarray(labels, dtype=np.int64)).max())
    interval = stats.binomtest(majority, samples).proportion_ci(confidence_level=CONFIDENCE, method="wilson")
    return ChanceLevel(majority / samples, float(interval.low), float(interval.high), samples)


def chance_level(config: ExperimentConfig) -> ChanceLevel | None:
    """The chance level of the test set ``config`` evaluates on; None where that data set cannot be read here
    (moved, or a download it would need: the report never downloads)."""
    from fedsim.data import load_dataset

    data = config.data
    if "download" in type(data).model_fields:
        data = data.model_copy(update={"download": False})
    try:
        labels = load_dataset(data, config.seed).y_test
    except (OSError, ValueError, RuntimeError):  # missing files, DataError, a reader that cannot find its source
        return None
    return chance_from_labels(labels) if len(labels) else None


def chance_levels(configs: Mapping[str, ExperimentConfig]) -> dict[str, ChanceLevel | None]:
    """Each run's chance level, its data set read once per distinct data config."""
    seen: dict[str, ChanceLevel | None] = {}
    levels = {}
    for name, config in configs.items():
        key = config.data.model_dump_json(exclude={"partition", "normalize"}) + f"/{config.seed}"
        if key not in seen:
            seen[key] = chance_level(config)
        levels[name] = seen[key]
    return levels
