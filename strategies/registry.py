"""Registries of the server side: strategies (name -> class built from the federation's sampling and the seed)
and central-DP mechanisms (``strategy.dp.kind`` -> ``DpMechanism``), each with its config model.

The strategy and mechanism modules register themselves when ``strategies`` imports every module of its package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedsim.core.registry import Registry

if TYPE_CHECKING:
    from strategies.dp import DpMechanism

STRATEGIES: Registry = Registry("strategy")
DP_MECHANISMS: Registry[DpMechanism] = Registry("dp mechanism")
