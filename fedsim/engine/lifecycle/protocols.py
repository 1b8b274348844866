"""How a strategy's rounds travel between server and clients, by the name its strategy class declares.

Most strategies speak Flower's Message API (``fedsim.engine.lifecycle.message_protocol`` /
``clients.client_app``). SecAgg+ exists in Flower only on the legacy path, with its own round and
client app (``fedsim.engine.lifecycle.secagg_protocol`` / ``clients.legacy_client``) and its own view of what
each tap sees (``adversary.secagg_taps``). A ``Protocol`` bundles the four, so the runner and the
adversary's wiring pick them by the strategy's ``protocol`` attribute instead of branching on names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from flwr.app import Context
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from adversary.secagg_taps import Layout, LegacyStrategyTap, MaskedWireTap
from adversary.taps import RoundFilter, Sink, StrategyTap, WireTap
from clients.client_app import ClientSpec, build_client_app
from clients.legacy_client import build_legacy_client_app
from fedsim.config import SECAGG_STRATEGY, FederationConfig
from fedsim.core.registry import Registry
from fedsim.engine.lifecycle.federation import Federation
from fedsim.engine.lifecycle.message_protocol import MessageRounds
from fedsim.engine.lifecycle.rounds import RoundProtocol, ServerSpec, build_server_app, serve
from fedsim.engine.lifecycle.secagg_protocol import SecAggPlusParameters, SecAggRounds
from strategies import STRATEGIES
from strategies.base import LegacyStrategy, MessageStrategy
from strategies.secagg import SecAggConfig

# The tap factories get the architecture's state_dict layout (names and shapes): the legacy path sends
# unnamed arrays, in that order.
WireTapFactory = Callable[[Grid, Sink, RoundFilter, Layout], Grid]
StrategyTapFactory = Callable[[Any, Sink, RoundFilter, Layout], Any]


@dataclass(frozen=True)
class Protocol:
    rounds: Callable[
        [ServerSpec, Federation], RoundProtocol
    ]  # plays one round (fedsim.engine.lifecycle.rounds drives them)
    client_app: Callable[[ClientSpec], ClientApp]
    wire_tap: WireTapFactory  # adversary.tap = mitm
    strategy_tap: StrategyTapFactory  # adversary.tap = server

    def server_app(self, spec: ServerSpec, federation: Federation) -> ServerApp:
        return build_server_app(spec, self.rounds(spec, federation))

    def serve(self, spec: ServerSpec, federation: Federation, grid: Grid, context: Context) -> None:
        """Play the run on a grid Flower already handed a ServerApp (the deployment engine's)."""
        serve(spec, self.rounds(spec, federation), grid, context)


PROTOCOLS: Registry[Protocol] = Registry("protocol")

PROTOCOLS.register("message", help="Flower's Message API: ServerApp and ClientApp handlers")(
    Protocol(
        rounds=lambda spec, federation: MessageRounds(cast(MessageStrategy, spec.strategy)),  # what it builds
        client_app=build_client_app,
        wire_tap=lambda grid, sink, wants, layout: WireTap(grid, sink, wants),
        strategy_tap=lambda strategy, sink, wants, layout: StrategyTap(strategy, sink, wants),
    )
)


def secagg_parameters(secagg: SecAggConfig, config: FederationConfig, federation: Federation) -> SecAggPlusParameters:
    """``strategy.secagg`` as the server runs it in ``federation``: max_weight defaults to the largest partition."""
    largest = max(len(partition) for partition in federation.partitions)
    return SecAggPlusParameters.of(secagg, config, largest)


def _secagg_rounds(spec: ServerSpec, federation: Federation) -> SecAggRounds:
    settings = spec.settings
    assert settings.secagg is not None, f"strategy.name is not {SECAGG_STRATEGY}"
    parameters = secagg_parameters(settings.secagg, settings.federation, federation)
    return SecAggRounds(cast(LegacyStrategy, spec.strategy), parameters, settings.seed, settings.federation.rounds)


PROTOCOLS.register(SECAGG_STRATEGY, help="Flower's legacy path with SecAggPlusWorkflow and secaggplus_mod")(
    Protocol(
        rounds=_secagg_rounds,
        client_app=build_legacy_client_app,
        wire_tap=lambda grid, sink, wants, layout: MaskedWireTap(grid, sink, layout, wants),
        strategy_tap=lambda strategy, sink, wants, layout: LegacyStrategyTap(strategy, sink, layout, wants),
    )
)


def protocol_of(strategy: str) -> Protocol:
    """How the rounds of the strategy named ``strategy`` (``strategy.name``) travel."""
    return PROTOCOLS.get(STRATEGIES.get(strategy).protocol)
