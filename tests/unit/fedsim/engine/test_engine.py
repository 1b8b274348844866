"""The engine's pieces: one forwarding Grid, the strategy contract, wire names spelled once, and the layers."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterable
from pathlib import Path

import pytest
from flwr.app import Message, MessageType, RecordDict
from flwr.serverapp import Grid

from adversary.secagg_taps import LegacyStrategyTap, MaskedWireTap
from adversary.taps import StrategyTap, WireTap
from fedsim.config import parse_config
from fedsim.core.messaging import ForwardingGrid
from fedsim.engine.assembly import strategy_of
from fedsim.engine.lifecycle.secagg_protocol import ProtocolMonitor
from strategies import STRATEGIES
from strategies.base import LegacyStrategy, MessageStrategy, ServerStrategy

ROOT = Path(__file__).resolve().parents[4]


class RecordingGrid(Grid):
    """A Grid that answers every call with a marker and remembers what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def _note(self, name: str, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.calls.append((name, args, kwargs))
        return f"{name}-result"

    def set_run(self, run) -> None:  # type: ignore[no-untyped-def]
        self._note("set_run", run)

    @property
    def run(self):  # type: ignore[no-untyped-def,override]
        return self._note("run")

    def create_message(self, *args, **kwargs):  # type: ignore[no-untyped-def,override]
        return self._note("create_message", *args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:
        return self._note("get_node_ids")  # type: ignore[return-value]

    def get_nodes(self):  # type: ignore[no-untyped-def]
        return self._note("get_nodes")

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self._note("push_messages", messages)  # type: ignore[return-value]

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self._note("pull_messages", message_ids)  # type: ignore[return-value]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self._note("send_and_receive", messages, timeout=timeout)  # type: ignore[return-value]


def grid_methods() -> set[str]:
    """Every method and property of Flower's Grid interface."""
    return {name for name in vars(Grid) if not name.startswith("_")}


# ------------------------------------------------------------------------------------ forwarding grid


def test_the_forwarding_grid_implements_every_method_of_flowers_grid():
    assert grid_methods() <= set(vars(ForwardingGrid)), grid_methods() - set(vars(ForwardingGrid))
    assert not getattr(ForwardingGrid, "__abstractmethods__", None)


def test_the_forwarding_grid_forwards_every_call_with_its_arguments_and_result():
    below = RecordingGrid()
    grid = ForwardingGrid(below)
    calls = {
        "set_run": lambda: grid.set_run("the-run"),
        "run": lambda: grid.run,
        "create_message": lambda: grid.create_message("content", "train", 7, "group", ttl=3.0),
        "get_node_ids": grid.get_node_ids,
        "get_nodes": grid.get_nodes,
        "push_messages": lambda: grid.push_messages(["m1", "m2"]),
        "pull_messages": lambda: grid.pull_messages(["id1"]),
        "send_and_receive": lambda: grid.send_and_receive(["m3"], timeout=4.0),
    }
    assert set(calls) == grid_methods()
    for name, call in calls.items():
        result = call()
        assert below.calls[-1][0] == name
        if name != "set_run":
            assert result == f"{name}-result"
    assert below.calls == [
        ("set_run", ("the-run",), {}),
        ("run", (), {}),
        ("create_message", ("content", "train", 7, "group"), {"ttl": 3.0}),
        ("get_node_ids", (), {}),
        ("get_nodes", (), {}),
        ("push_messages", (["m1", "m2"],), {}),
        ("pull_messages", (["id1"],), {}),
        ("send_and_receive", (["m3"],), {"timeout": 4.0}),
    ]


@pytest.mark.parametrize("wrapper", [WireTap, MaskedWireTap, ProtocolMonitor])
def test_every_grid_wrapper_is_a_forwarding_grid_that_forwards_what_it_does_not_watch(wrapper):
    assert issubclass(wrapper, ForwardingGrid)
    watched = {"push_messages", "pull_messages", "send_and_receive"}
    for name in grid_methods() - watched:  # no second hand-written pass-through
        assert name not in vars(wrapper), f"{wrapper.__name__} redefines {name}"


def test_a_wire_tap_forwards_the_node_list_and_the_run_unchanged():
    below = RecordingGrid()
    tap = WireTap(below, sink=lambda update: None)
    assert tap.get_node_ids() == "get_node_ids-result" and tap.run == "run-result"


# ------------------------------------------------------------------------------- strategy contract


def config_of(strategy: dict):
    return parse_config({"federation": {"num_clients": 4}, "strategy": strategy})


@pytest.mark.parametrize(
    ("strategy", "contract"),
    [
        ({"name": "fedavg"}, MessageStrategy),
        ({"name": "fedavg", "dp": {"kind": "server-fixed"}}, MessageStrategy),
        ({"name": "fedavg", "dp": {"kind": "client-adaptive", "clipped_count_stddev": 1.0}}, MessageStrategy),
        ({"name": "secagg+"}, LegacyStrategy),
    ],
)
def test_every_strategy_and_every_wrapper_fulfils_its_protocols_contract(strategy, contract):
    built = strategy_of(config_of(strategy))
    tap = (
        StrategyTap(built, lambda update: None)
        if contract is MessageStrategy
        else LegacyStrategyTap(built, lambda u: None, {})
    )
    for candidate in (built, tap):
        assert isinstance(candidate, contract) and isinstance(candidate, ServerStrategy)
        assert candidate.protocol == STRATEGIES.get(strategy["name"]).protocol
        candidate.bind({partition: 50 + partition for partition in range(4)})
        assert candidate.sample_partitions(1) == [0, 1, 2, 3]
        assert isinstance(candidate.round_metrics(1), dict)


def test_wrappers_forward_the_contract_explicitly_not_through_getattr():
    for wrapper in (StrategyTap, LegacyStrategyTap, type(strategy_of(config_of({"dp": {}})))):
        assert not any("__getattr__" in vars(cls) for cls in inspect.getmro(wrapper)), wrapper


def test_a_wrapper_missing_a_method_of_the_contract_is_refused_by_the_check():
    class Incomplete:
        protocol = "message"

        def bind(self, node_of_partition) -> None: ...

    assert not isinstance(Incomplete(), MessageStrategy)


def test_sample_partitions_has_one_signature_everywhere():
    signatures = {
        inspect.signature(cls.sample_partitions).parameters.keys().__repr__()
        for cls in (
            ServerStrategy,
            StrategyTap,
            LegacyStrategyTap,
            *(STRATEGIES.get(name) for name in ("fedavg", "secagg+")),
            type(strategy_of(config_of({"dp": {}}))),
        )
    }
    assert len(signatures) == 1, signatures


# ------------------------------------------------------------------------------------------- layers


def project_imports(path: Path) -> set[str]:
    """Modules of the project that ``path`` imports (at any depth of the file)."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in names if name.split(".")[0] in ("fedsim", "adversary", "clients", "strategies")}


def test_adversary_clients_and_strategies_never_import_the_engine():
    for package in ("adversary", "clients", "strategies"):
        for path in (ROOT / package).rglob("*.py"):
            engine = {name for name in project_imports(path) if name.startswith("fedsim.engine")}
            assert not engine, f"{path.relative_to(ROOT)} imports {sorted(engine)}"


def test_the_wire_module_and_the_messaging_helpers_import_nothing_of_the_project():
    for module in ("wire", "messaging"):
        assert project_imports(ROOT / "fedsim" / "core" / f"{module}.py") <= {"fedsim"}, module


def test_wire_keys_are_spelled_only_in_the_wire_module():
    for package in ("adversary", "clients", "strategies", "fedsim"):
        for path in (ROOT / package).rglob("*.py"):
            if path.name == "wire.py":
                continue
            text = path.read_text()
            for key in ('"partition-id"', '"server-round"', '"num-examples"', '"local-steps"', '"fitres.metrics"'):
                assert key not in text, f"{path.relative_to(ROOT)} spells {key}"


def test_roll_call_messages_are_queries_without_content(monkeypatch):
    """The roll call is the one message the driver sends itself; it asks nothing but the partition."""
    from fedsim.core import wire
    from fedsim.core.flower_private import stamp_task_identity
    from fedsim.engine.lifecycle.rounds import roll_call

    stamp_task_identity(monkeypatch)  # messages are stamped with the process's run and node

    class AnsweringGrid(RecordingGrid):
        def get_node_ids(self):  # type: ignore[no-untyped-def]
            return [11, 12]

        def send_and_receive(self, messages, *, timeout=None):  # type: ignore[no-untyped-def]
            from flwr.app import MetricRecord

            replies = []
            for partition, message in enumerate(messages):
                assert message.metadata.message_type == MessageType.QUERY and not message.content
                reply = Message(
                    RecordDict({wire.IDENTITY: MetricRecord({wire.PARTITION_ID: 1 - partition})}), reply_to=message
                )
                replies.append(reply)
            return replies

    assert roll_call(AnsweringGrid(), 2) == {1: 11, 0: 12}
