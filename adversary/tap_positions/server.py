"""``server``: the server itself, seeing what its strategy sees.

It sees the replies the strategy aggregates (under SecAgg+ only their sum, ``adversary.secagg_taps``) and the
aggregate it releases; a malicious server (``adversary.server: malicious``) sits here, since it attacks what
it receives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adversary.tap_positions.registry import TAPS, TapFactories, TapPosition, TapWiring

if TYPE_CHECKING:
    from adversary.secagg_taps import Layout
    from adversary.taps import RoundFilter, Sink


class StrategyPosition(TapPosition):
    """Wraps the strategy: it sees each round's replies and aggregate as the strategy does."""

    def wrap(self, protocol: TapFactories, sink: Sink, wants: RoundFilter, layout: Layout) -> TapWiring:
        return TapWiring(None, lambda strategy: protocol.strategy_tap(strategy, sink, wants, layout))


POSITION = StrategyPosition(name="server", malicious_server=True, holds_aggregate=True)
TAPS.register(
    POSITION.name, help="what the server's strategy sees: each reply and the aggregate (only the sum under SecAgg+)"
)(POSITION)
