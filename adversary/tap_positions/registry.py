"""The tap positions: where the adversary listens (``adversary.tap`` -> ``TapPosition``).

Each position module registers one ``TapPosition`` in ``TAPS``: what it observes (its help line), whether a
malicious server can sit there, whether it holds the aggregate as the server does, and how it is plugged into
a run (``attach``: a wrapped grid or a wrapped strategy). What a tap records is ``adversary.taps`` (Message API)
and ``adversary.secagg_taps`` (SecAgg+); a protocol hands a position its two tap factories.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from fedsim.core.registry import Registry

if TYPE_CHECKING:
    from adversary.secagg_taps import Layout
    from adversary.taps import RoundFilter, Sink, TappedUpdate


class TapFactories(Protocol):
    """A protocol's two ways to tap its rounds (``fedsim.engine.lifecycle.protocols.Protocol``)."""

    def wire_tap(self, grid: Any, sink: Sink, wants: RoundFilter, layout: Layout) -> Any: ...

    def strategy_tap(self, strategy: Any, sink: Sink, wants: RoundFilter, layout: Layout) -> Any: ...


@dataclass(frozen=True)
class TapWiring:
    """How a position plugs into a run: a grid wrapper (None: the grid as it is) and a strategy wrapper."""

    wrap_grid: Callable[[Any], Any] | None
    wrap_strategy: Callable[[Any], Any]


@dataclass(frozen=True)
class TapPosition(ABC):
    """Where the adversary listens; its help line in ``TAPS`` says what it observes."""

    #: its name in ``TAPS`` (``adversary.tap``): what it writes as ``TappedUpdate.tap``, which the adversary keeps
    name: str
    #: a malicious server can sit here: it attacks what it receives (``adversary.server: malicious``)
    malicious_server: bool
    #: it holds the aggregate the server releases, as an observed update of its own (a wire tap forms it
    #: itself from the replies it saw)
    holds_aggregate: bool

    def attach(self, protocol: TapFactories, sink: Sink, wants: RoundFilter, layout: Layout) -> TapWiring:
        """The grid or strategy wrapper that hands ``sink`` what this position sees in the rounds ``wants`` picks,
        each update under this position's name (a new position may reuse a protocol's wire or strategy tap)."""

        def labelled(update: TappedUpdate) -> None:
            sink(update if update.tap == self.name else replace(update, tap=self.name))

        return self.wrap(protocol, labelled, wants, layout)

    @abstractmethod
    def wrap(self, protocol: TapFactories, sink: Sink, wants: RoundFilter, layout: Layout) -> TapWiring:
        """Plug one of ``protocol``'s taps (``wire_tap`` or ``strategy_tap``) into the run, handing ``sink``."""


TAPS: Registry[TapPosition] = Registry("tap position")


def malicious_server_positions() -> list[str]:
    """The positions a malicious server can sit at (the fix named when ``adversary.tap`` is not one)."""
    return [name for name in TAPS if TAPS.get(name).malicious_server]
