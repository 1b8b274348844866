"""Build the server strategy of ``strategy``: the registered strategy, wrapped by ``strategy.dp`` if set."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from strategies.base import ClientSampling, ServerStrategy
from strategies.dp import DpConfig, wrap_dp
from strategies.registry import STRATEGIES


def build_strategy(
    name: str,
    federation: ClientSampling,
    seed: int,
    dp: DpConfig | None = None,
    history: Iterable[Mapping[str, Any]] = (),
) -> ServerStrategy:
    """The registered strategy ``name``, wrapped in ``dp``'s mechanism when set; ``history`` is a resumed run's
    metrics rows (restores DP state)."""
    strategy = STRATEGIES.get(name)(federation, seed)
    return strategy if dp is None else wrap_dp(strategy, dp, federation, seed, history)
