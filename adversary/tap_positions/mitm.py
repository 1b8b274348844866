"""``mitm``: a man in the middle on the wire between the server and the clients.

It sees each client's train reply as sent (after any client-side defense) and the global model in the server's
outgoing messages; under SecAgg+ the replies are masked vectors (``adversary.secagg_taps.MaskedWireTap``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adversary.tap_positions.registry import TAPS, TapFactories, TapPosition, TapWiring

if TYPE_CHECKING:
    from adversary.secagg_taps import Layout
    from adversary.taps import RoundFilter, Sink


class WirePosition(TapPosition):
    """Wraps the grid: every message passes through it, none is changed."""

    def wrap(self, protocol: TapFactories, sink: Sink, wants: RoundFilter, layout: Layout) -> TapWiring:
        return TapWiring(lambda grid: protocol.wire_tap(grid, sink, wants, layout), lambda strategy: strategy)


POSITION = WirePosition(name="mitm", malicious_server=False, holds_aggregate=False)
TAPS.register(POSITION.name, help="each client's reply on the wire, as sent (after client-side defenses)")(POSITION)
