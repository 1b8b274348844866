"""Build the server strategy a config asks for: the registered strategy, wrapped by `strategy.dp` if set."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from strategies.base import ServerStrategy
from strategies.dp import wrap_dp
from strategies.registry import STRATEGIES

if TYPE_CHECKING:
    from fedsim.config import ExperimentConfig


def build_strategy(config: ExperimentConfig, history: Iterable[Mapping[str, Any]] = ()) -> ServerStrategy:
    """The strategy of ``config.strategy``; ``history`` is a resumed run's metrics rows (restores DP state)."""
    strategy = STRATEGIES.get(config.strategy.name)(config.federation, config.seed)
    return strategy if config.strategy.dp is None else wrap_dp(strategy, config, history)
