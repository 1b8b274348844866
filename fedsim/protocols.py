"""How a strategy's rounds travel between server and clients, by the name its strategy class declares.

Most strategies speak Flower's Message API (``fedsim.server_app`` / ``clients.client_app``). SecAgg+
exists in Flower only on the legacy path, with its own apps on both sides
(``fedsim.secagg_server`` / ``clients.legacy_client``) and its own view of what each tap sees
(``strategies.secagg_taps``). A ``Protocol`` bundles the four, so the runner and the adversary's
wiring pick them by the strategy's ``protocol`` attribute instead of branching on strategy names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from clients.client_app import ClientSpec, build_client_app
from clients.legacy_client import build_legacy_client_app
from fedsim.config import SECAGG_STRATEGY, ExperimentConfig
from fedsim.federation import Federation
from fedsim.base import Registry
from fedsim.secagg_server import build_secagg_server_app
from fedsim.server_app import ServerSpec, build_server_app
from strategies import STRATEGIES
from strategies.secagg import SecAggPlusParameters
from strategies.secagg_taps import Layout, LegacyStrategyTap, MaskedWireTap
from strategies.taps import RoundFilter, Sink, StrategyTap, WireTap

# The tap factories get the architecture's state_dict layout (names and shapes): the legacy path sends
# unnamed arrays, in that order.
WireTapFactory = Callable[[Grid, Sink, RoundFilter, Layout], Grid]
StrategyTapFactory = Callable[[Any, Sink, RoundFilter, Layout], Any]


@dataclass(frozen=True)
class Protocol:
    server_app: Callable[[ServerSpec, Federation], ServerApp]
    client_app: Callable[[ClientSpec], ClientApp]
    wire_tap: WireTapFactory  # adversary.tap = mitm
    strategy_tap: StrategyTapFactory  # adversary.tap = server


PROTOCOLS: Registry[Protocol] = Registry("protocol")

PROTOCOLS.register("message", help="Flower's Message API: ServerApp and ClientApp handlers")(
    Protocol(
        server_app=lambda spec, federation: build_server_app(spec),
        client_app=build_client_app,
        wire_tap=lambda grid, sink, wants, layout: WireTap(grid, sink, wants),
        strategy_tap=lambda strategy, sink, wants, layout: StrategyTap(strategy, sink, wants),
    )
)


def _secagg_server_app(spec: ServerSpec, federation: Federation) -> ServerApp:
    largest = max(len(partition) for partition in federation.partitions)  # the default max_weight
    return build_secagg_server_app(spec, SecAggPlusParameters.from_config(spec.config, largest))


PROTOCOLS.register(SECAGG_STRATEGY, help="Flower's legacy path with SecAggPlusWorkflow and secaggplus_mod")(
    Protocol(
        server_app=_secagg_server_app,
        client_app=build_legacy_client_app,
        wire_tap=lambda grid, sink, wants, layout: MaskedWireTap(grid, sink, layout, wants),
        strategy_tap=lambda strategy, sink, wants, layout: LegacyStrategyTap(strategy, sink, layout, wants),
    )
)


def protocol_of(config: ExperimentConfig) -> Protocol:
    return PROTOCOLS.get(STRATEGIES.get(config.strategy.name).protocol)
