"""`strategy.name: secagg+`: Flower's real SecAgg+ protocol, its config, drop-outs and what each tap sees.

Most checks run the real protocol (SecAggPlusWorkflow on the server, secaggplus_mod and fedsim's mods on
the clients) through ``InProcessGrid``, a transport that hands each message, serialised and parsed as on
the wire, to a ClientApp in a thread of this process: a round takes well under a second. The clients
there are ``FixedUpdateClient``s, whose updates are known exactly. The `simulation` tests run the whole
thing in Flower's Ray simulation with fedsim's real training.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import Context, Error, Message, RecordDict
from flwr.client import NumPyClient
from flwr.clientapp import ClientApp
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from flwr.common.serde import message_from_proto, message_to_proto
from flwr.serverapp import Grid

from adversary.secagg_taps import LegacyStrategyTap, MaskedWireTap
from adversary.taps import AGGREGATE
from clients.legacy_client import secagg_client_mods
from fedsim.config import ConfigError, parse_config
from fedsim.engine.lifecycle.assembly import client_spec_of, strategy_of
from fedsim.engine.lifecycle.rounds import ServerSpec, run_rounds
from fedsim.engine.lifecycle.secagg_protocol import SecAggPlusParameters, SecAggRounds
from fedsim.core.messaging import collect_replies
from fedsim.engine.lifecycle.progress import LogProgress
from fedsim.rundir.writer import RunStore
from tiny_configs import TRAINING, merged, tiny_config

GLOBAL = {"w": torch.linspace(-1.0, 1.0, 400).reshape(20, 20), "b": torch.zeros(20), "steps": torch.tensor(7)}
LAYOUT = {name: tuple(value.shape) for name, value in GLOBAL.items()}
FIRST_NODE = 100


pytestmark = pytest.mark.usefixtures("task_identity")  # messages built outside a Flower run (conftest.py)


# ----------------------------------------------------------------------------------------- harness


class InProcessGrid(Grid):
    """Delivers every message to a ClientApp in a thread, as a serialised copy, and collects the replies."""

    def __init__(self, app: ClientApp, num_clients: int) -> None:
        self.app = app
        self.contexts = {
            FIRST_NODE + p: Context(run_id=1, node_id=FIRST_NODE + p, node_config={"partition-id": p}, state=RecordDict(), run_config={})
            for p in range(num_clients)
        }
        self.sent: list[Message] = []
        self._replies: dict[str, Message] = {}
        self._lock = threading.Lock()

    def set_run(self, run) -> None:  # type: ignore[no-untyped-def]
        pass

    @property
    def run(self):  # type: ignore[no-untyped-def,override]
        return None

    def create_message(self, *args, **kwargs) -> Message:  # type: ignore[no-untyped-def,override]
        raise NotImplementedError

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def _deliver(self, message_id: str, wire: bytes) -> None:
        from flwr.proto.message_pb2 import Message as ProtoMessage  # type: ignore[attr-defined]

        received = message_from_proto(ProtoMessage.FromString(wire))
        try:
            reply = self.app(received, self.contexts[received.metadata.dst_node_id])
        except Exception as error:  # what Flower's simulation does with a ClientApp that raises
            reply = Message(Error(code=0, reason=repr(error)), reply_to=received)
        reply = message_from_proto(message_to_proto(reply))
        with self._lock:
            self._replies[message_id] = reply

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = message_id = str(uuid.uuid4())
            self.sent.append(message_from_proto(message_to_proto(message)))
            wire = message_to_proto(message).SerializeToString()  # serialised now, as the SuperLink would
            threading.Thread(target=self._deliver, args=(message_id, wire), daemon=True).start()
            ids.append(message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        with self._lock:
            return [self._replies.pop(i) for i in list(message_ids) if i in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return collect_replies(self, messages, timeout)


def update_of(partition: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(partition)
    return {
        name: (0.1 * torch.randn(value.shape, generator=generator) if value.is_floating_point() else torch.tensor(partition))
        for name, value in GLOBAL.items()
    }


def examples_of(partition: int) -> int:
    return 10 + 5 * partition


class FixedUpdateClient(NumPyClient):
    """Sends global + update_of(partition); the failures of the config fire in fedsim's client mods around it."""

    def __init__(self, config, partition: int) -> None:
        self.config, self.partition = config, partition

    def fit(self, parameters, config):
        update = update_of(self.partition)
        sent = [np.atleast_1d(array + update[name].numpy()) for name, array in zip(GLOBAL, parameters)]
        metrics = {"partition-id": self.partition, "num-examples": examples_of(self.partition), "local-steps": 1}
        return sent, examples_of(self.partition), metrics


def secagg_config(num_clients: int = 5, rounds: int = 1, failures=(), timeout: float = 30.0, **secagg):
    return parse_config(
        {
            "seed": 4,
            "federation": {"num_clients": num_clients, "rounds": rounds, "failures": list(failures), "round_timeout": timeout},
            "strategy": {"name": "secagg+", "secagg": secagg},
        }
    )


def run_protocol(config, tmp_path: Path, *, server_sink=None, wire_sink=None, start_round=0, start_state=GLOBAL):
    """Run the rounds of ``config`` after ``start_round`` through the real protocol in-process; returns (store, grid)."""
    num_clients = config.federation.num_clients
    spec = client_spec_of(
        config, tmp_path, partitions=tuple(np.arange(examples_of(p)) for p in range(num_clients)),
        stats=(), num_classes=2, channels=1, image_size=4,
    )
    app = ClientApp(client_fn=lambda context: FixedUpdateClient(config, int(context.node_config["partition-id"])).to_client(),
                    mods=secagg_client_mods(spec))
    grid = InProcessGrid(app, num_clients)
    store = RunStore.create(config, "cpu", tmp_path / "run")
    strategy = strategy_of(config)
    if server_sink is not None:
        strategy = LegacyStrategyTap(strategy, server_sink, LAYOUT)
    server = ServerSpec(
        config=config, store=store, strategy=strategy, initial_state=start_state, start_round=start_round,
        evaluate=lambda state: {"accuracy": 0.0}, progress=LogProgress(),
        wrap_grid=(lambda g: MaskedWireTap(g, wire_sink, LAYOUT)) if wire_sink is not None else None,
    )
    parameters = SecAggPlusParameters.from_config(config, largest_partition=examples_of(num_clients - 1))
    main_grid = server.wrap_grid(grid) if server.wrap_grid else grid
    rounds = SecAggRounds(strategy, parameters, config.seed, config.federation.rounds)
    run_rounds(server, rounds, main_grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}))
    return store, grid


def fedavg_of(partitions: list[int], start: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    weights = torch.tensor([float(examples_of(p)) for p in partitions], dtype=torch.float64)
    return {
        name: start[name].double() + sum(w * update_of(p)[name].double() for w, p in zip(weights, partitions)) / weights.sum()
        for name in start
    }


def quantisation_bound(config, partitions: list[int]) -> float:
    """Largest error of SecAgg+'s mean: each client's stochastic rounding is off by < one step, in weighted units."""
    secagg = config.strategy.secagg
    step = 2 * secagg.clipping_range / secagg.quantization_range
    max_weight = examples_of(config.federation.num_clients - 1)
    return len(partitions) * step / sum(examples_of(p) / max_weight for p in partitions)


def rows(store: RunStore, event: str, server_round: int | None = None) -> list[dict]:
    return [r for r in store.rows() if r["event"] == event and (server_round is None or r["round"] == server_round)]


# ------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("raw", "starts"),
    [
        ({"num_shares": 3, "reconstruction_threshold": 4}, "strategy.secagg.reconstruction_threshold = 4: must be <= num_shares (3)"),
        ({"reconstruction_threshold": 6}, "strategy.secagg.reconstruction_threshold = 6: must be <= num_shares (5)"),
        ({"num_shares": 4}, "strategy.secagg.num_shares = 4: must be odd"),
        ({"num_shares": 7}, "strategy.secagg.num_shares = 7: must be <= the clients sampled per round (5)"),
        ({"reconstruction_threshold": 1}, "strategy.secagg.reconstruction_threshold = 1: Input should be greater than or equal to 2"),
        ({"clipping_range": 0}, "strategy.secagg.clipping_range = 0: Input should be greater than 0"),
        ({"quantization_range": 2**30}, "strategy.secagg.quantization_range = 1073741824: the sum of 5 sampled clients would overflow"),
        ({"max_weight": -1}, "strategy.secagg.max_weight = -1: Input should be greater than 0"),
        ({"num_share": 3}, "unknown key 'strategy.secagg.num_share' (did you mean 'num_shares'?)"),
    ],
)
def test_bad_secagg_parameters_fail_in_one_line_naming_the_key(raw, starts):
    with pytest.raises(ConfigError) as error:
        secagg_config(**raw)
    assert str(error.value).startswith(starts) and "\n" not in str(error.value)


def test_secagg_settings_that_do_not_fit_the_rest_of_the_config_fail_too():
    cases = [
        ({"strategy": {"name": "fedavg", "secagg": {"num_shares": 3}}}, "strategy.secagg = {'num_shares': 3}: SecAgg+ parameters need strategy.name = secagg+"),
        ({"strategy": {"name": "secagg+", "dp": {}}}, "strategy.dp = {kind: server-fixed, ...}: "),
        ({"strategy": {"name": "secagg+"}, "federation": {"num_clients": 1}}, "federation.num_clients = 1: secagg+ samples 1 client"),
        ({"strategy": {"name": "secagg+"}, "federation": {"fraction_evaluate": 0.5}}, "federation.fraction_evaluate = 0.5: "),
        ({"federation": {"failures": [{"round": 1, "client": 0, "stage": "unmask"}]}}, "federation.failures[0].stage = 'unmask': protocol stages exist only under"),
        ({"strategy": {"name": "secagg+"}, "federation": {"failures": [{"round": 1, "client": 0, "stage": "setup", "kind": "nan"}]}}, "federation.failures[0].stage = 'setup': a nan loss"),
    ]
    for raw, starts in cases:
        with pytest.raises(ConfigError) as error:
            parse_config(raw)
        assert str(error.value).startswith(starts), str(error.value)


def test_the_cli_refuses_bad_parameters_before_anything_runs(tmp_path, capsys):
    from fedsim.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text("strategy: {name: secagg+, secagg: {num_shares: 3, reconstruction_threshold: 5}}\nfederation: {num_clients: 5}\n")
    assert main(["run", str(path), "--quiet", "--set", f"output.dir={tmp_path / 'runs'}"]) == 2
    assert capsys.readouterr().err.strip() == (
        "fedsim: error: strategy.secagg.reconstruction_threshold = 5: must be <= num_shares (3)"
    )
    assert not (tmp_path / "runs").exists()


def test_defaults_follow_the_number_of_sampled_clients():
    for clients, fraction, shares, threshold in [(2, 1.0, 2, 2), (5, 1.0, 5, 3), (10, 1.0, 10, 6), (10, 0.5, 5, 3)]:
        config = parse_config({"strategy": {"name": "secagg+"}, "federation": {"num_clients": clients, "fraction_fit": fraction}})
        resolved = SecAggPlusParameters.from_config(config, largest_partition=40)
        assert (resolved.sampled, resolved.num_shares, resolved.threshold, resolved.max_weight) == (
            clients * fraction, shares, threshold, 40.0,
        )


@pytest.mark.parametrize(("clients", "secagg"), [(2, {}), (5, {}), (5, {"num_shares": 3, "reconstruction_threshold": 2}), (5, {"reconstruction_threshold": 5})])
def test_flower_runs_the_protocol_with_exactly_the_configured_integers(tmp_path, clients, secagg):
    config = secagg_config(num_clients=clients, **secagg)
    store, grid = run_protocol(config, tmp_path)
    setup = [m for m in grid.sent if m.content.config_records.get(RECORD_KEY_CONFIGS, {}).get(Key.STAGE) == Stage.SETUP]
    resolved = SecAggPlusParameters.from_config(config, examples_of(clients - 1))
    assert len(setup) == clients
    for message in setup:
        settings = message.content.config_records[RECORD_KEY_CONFIGS]
        assert (settings[Key.SHARE_NUMBER], settings[Key.THRESHOLD]) == (resolved.num_shares, resolved.threshold)
    assert rows(store, "eval", 1)[0]["model_updated"] is True


# ---------------------------------------------------------------------------------- the aggregate


def test_the_unmasked_sum_is_fedavg_within_the_quantisation_error(tmp_path):
    config = secagg_config()
    store, _ = run_protocol(config, tmp_path)
    released = store.load_checkpoint(1)
    expected = fedavg_of(list(range(5)), GLOBAL)
    error = max(float((released[n].double() - expected[n]).abs().max()) for n in ("w", "b"))
    assert 0 < error <= quantisation_bound(config, list(range(5)))  # quantised, and by no more than that
    # A 0-d integer buffer keeps its shape and dtype and is averaged (Flower's unmask alone would not rescale it).
    assert released["steps"].shape == () and released["steps"].dtype == torch.int64
    assert abs(int(released["steps"]) - float(expected["steps"])) <= 0.5 + 1e-3  # the mean, rounded
    assert [r["status"] for r in rows(store, "fit", 1)] == ["ok"] * 5


def test_a_resumed_secagg_run_repeats_the_uninterrupted_one_exactly(tmp_path):
    failures = [{"round": 2, "client": 0, "stage": "share_keys"}]
    whole, _ = run_protocol(secagg_config(rounds=2, failures=failures), tmp_path / "whole")
    resumed, _ = run_protocol(secagg_config(rounds=2, failures=failures), tmp_path / "resumed",
                              start_round=1, start_state=whole.load_checkpoint(1))
    for name, value in whole.load_checkpoint(2).items():  # fresh keys and masks, the same sum
        assert torch.equal(value, resumed.load_checkpoint(2)[name])

    def comparable(store: RunStore) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in ("time", "seconds")} for r in store.rows() if r["round"] == 2]

    assert comparable(whole) == comparable(resumed)


# --------------------------------------------------------------------------------------- drop-outs


def test_a_client_dropping_out_in_any_stage_leaves_an_aggregate_with_threshold_3_of_5(tmp_path):
    """Round r drops client r in stage r; round 5 loses three clients, below the threshold, and halts."""
    stages = list(Stage.all())
    failures = [{"round": r + 1, "client": r + 1, "stage": stage} for r, stage in enumerate(stages)]
    failures += [{"round": 5, "client": c, "stage": "collect_masked_vectors"} for c in (0, 2, 4)]
    config = secagg_config(rounds=5, failures=failures, reconstruction_threshold=3)
    store, _ = run_protocol(config, tmp_path)

    for server_round, stage in enumerate(stages, start=1):
        dropped = server_round
        fit = {r["client"]: r for r in rows(store, "fit", server_round)}
        assert fit[dropped]["dropped_at"] == stage and "InjectedFailure" in fit[dropped]["error"]
        assert all("dropped_at" not in fit[c] and fit[c]["status"] == "ok" for c in fit if c != dropped)
        in_sum = [c for c in range(5) if c != dropped or stage == "unmask"]  # an unmask drop-out already sent its vector
        assert fit[dropped]["status"] == ("ok" if stage == "unmask" else "failed")
        (evaluation,) = rows(store, "eval", server_round)
        assert evaluation["model_updated"] and evaluation["secagg_dropped"] == [dropped]
        assert evaluation["clients_ok"] == len(in_sum) and evaluation["secagg_halted_after"] is None
        start, released = store.load_checkpoint(server_round - 1), store.load_checkpoint(server_round)
        expected = fedavg_of(in_sum, start)
        error = max(float((released[n].double() - expected[n]).abs().max()) for n in ("w", "b"))
        assert error <= quantisation_bound(config, in_sum), (stage, error)

    (halted,) = rows(store, "eval", 5)
    assert not halted["model_updated"] and halted["secagg_halted_after"] == "collect_masked_vectors"
    assert halted["secagg_dropped"] == [0, 2, 4]
    assert halted["clients_ok"] == 0 and halted["clients_failed"] == 5  # nothing was aggregated
    survivors = {r["client"]: r for r in rows(store, "fit", 5) if r["client"] in (1, 3)}
    for row in survivors.values():  # they trained and sent their masked vectors, which were never summed
        assert row["status"] == "failed" and "halted after stage 'collect_masked_vectors'" in row["error"]
        assert "never summed" in row["error"] and row["num_examples"] > 0
    assert all(torch.equal(store.load_checkpoint(5)[n], store.load_checkpoint(4)[n]) for n in GLOBAL)


def test_a_client_that_stops_answering_is_dropped_after_the_timeout(tmp_path):
    failures = [{"round": 1, "client": 3, "stage": "share_keys", "kind": "hang"}]
    store, _ = run_protocol(secagg_config(failures=failures, timeout=1.0), tmp_path)
    fit = {r["client"]: r for r in rows(store, "fit", 1)}
    assert fit[3]["status"] == "failed" and fit[3]["dropped_at"] == "share_keys"
    assert fit[3]["error"] == "no reply before federation.round_timeout"
    assert rows(store, "eval", 1)[0]["model_updated"]


# -------------------------------------------------------------------------------------------- taps


def test_the_server_tap_gets_the_sum_and_clear_counts_and_the_wire_tap_masked_noise(tmp_path):
    server_seen, wire_seen = [], []
    store, _ = run_protocol(secagg_config(), tmp_path, server_sink=server_seen.append, wire_sink=wire_seen.append)

    (aggregate,) = server_seen  # no per-client update ever reaches the strategy
    assert aggregate.tap == "server" and aggregate.source == AGGREGATE
    assert aggregate.contributors == (0, 1, 2, 3, 4)
    assert aggregate.contributor_examples == tuple(examples_of(p) for p in range(5))
    assert aggregate.num_examples == sum(examples_of(p) for p in range(5))
    released = store.load_checkpoint(1)
    assert torch.allclose(aggregate.observed_state["w"], released["w"], atol=1e-6)
    assert torch.equal(aggregate.global_state["w"], GLOBAL["w"])

    assert sorted(u.source for u in wire_seen) == [f"client:{p}" for p in range(5)]
    for update in wire_seen:
        partition = update.contributors[0]
        assert update.tap == "mitm" and update.num_examples == examples_of(partition)
        assert torch.equal(update.global_state["w"], GLOBAL["w"])
        observed = (update.observed_state["w"] - GLOBAL["w"]).ravel().double()
        truth = update_of(partition)["w"].ravel().double()
        # uniform over +-clipping_range / weight: nothing like the update (std 0.1) and uncorrelated with it
        bound = 8.0 * examples_of(4) / examples_of(partition)
        assert observed.abs().max() <= bound + 1.1 and observed.std() > 10 * truth.std()
        assert abs(float(torch.corrcoef(torch.stack([observed, truth]))[0, 1])) < 0.25


# -------------------------------------------------------------------------------------- simulation

SIMULATED = merged(
    TRAINING,
    name="secagg",
    federation={"num_clients": 5, "failures": [{"round": 2, "client": 1}]},
    client={"defenses": [{"name": "noise", "sigma": 0.001}]},  # seeded per (round, client): the same in both runs
)


@pytest.fixture(scope="module")
def fedavg_and_secagg(tmp_path_factory) -> tuple[RunStore, RunStore]:
    """The same federation and seed under FedAvg and SecAgg+ (server tap on round 2); client 1 fails in round 2."""
    from fedsim.engine.lifecycle.runner import run_experiment

    out = tmp_path_factory.mktemp("runs")
    fedavg = {**SIMULATED, "output": {"dir": str(out), "run_name": "fedavg"}}
    secagg = {
        **SIMULATED,
        "strategy": {"name": "secagg+", "secagg": {"reconstruction_threshold": 3}},
        "adversary": {"tap": "server", "targets": "both", "rounds": [2], "attacks": [{"name": "dlg", "iterations": 2}]},
        "output": {"dir": str(out), "run_name": "secagg"},
    }
    return tuple(RunStore(run_experiment(parse_config(raw), quiet=True)) for raw in (fedavg, secagg))


@pytest.mark.simulation
def test_a_secagg_federation_aggregates_like_fedavg_within_the_quantisation_error(fedavg_and_secagg):
    fedavg, secagg = fedavg_and_secagg
    fits = rows(secagg, "fit", 1)
    assert [r["status"] for r in fits] == ["ok"] * 5 and all(r["local_steps"] == 5 for r in fits)
    assert all(r["defense.noise.norm_after"] > 0 for r in fits)  # the client's defense ran before the masking
    evals = rows(secagg, "eval")
    assert [r["round"] for r in evals] == [0, 1, 2] and all(r["model_updated"] for r in evals[1:])
    step = 2 * 8.0 / 2**22
    weights = sum(r["num_examples"] / evals[1]["secagg_max_weight"] for r in fits)
    first = {n: secagg.load_checkpoint(1)[n].double() - fedavg.load_checkpoint(1)[n].double() for n in fedavg.load_checkpoint(1)}
    error = max(float(d.abs().max()) for d in first.values())
    assert 0 < error <= 5 * step / weights  # the same updates, summed securely: off by the quantisation only

    # Round 2: client 1 fails while training, in its masked-vector stage; the other four are summed.
    dropped = {r["client"]: r for r in rows(secagg, "fit", 2)}[1]
    assert dropped["status"] == "failed" and dropped["dropped_at"] == "collect_masked_vectors"
    assert "InjectedFailure" in dropped["error"]
    assert (evals[2]["clients_ok"], evals[2]["clients_failed"], evals[2]["secagg_dropped"]) == (4, 1, [1])
    second = max(float((secagg.load_checkpoint(2)[n].double() - fedavg.load_checkpoint(2)[n].double()).abs().max())
                 for n in first)
    assert second < 1e-3
    for a, b in zip(rows(fedavg, "eval"), evals):  # what the quantisation and clipping cost in accuracy
        assert abs(a["accuracy"] - b["accuracy"]) <= 0.01


@pytest.mark.simulation
def test_the_server_tap_never_gets_a_client_update_under_secagg(fedavg_and_secagg):
    _, secagg = fedavg_and_secagg
    attacks = rows(secagg, "attack")
    assert [(r["tap"], r["target"], r["status"]) for r in attacks] == [("server", "aggregate", "ok")]  # targets: both
    fits = {r["client"]: r["num_examples"] for r in rows(secagg, "fit", 2) if r["status"] == "ok"}
    assert attacks[0]["batch_size"] == sum(min(n, 16 * 5) for n in fits.values())  # clear counts, 4 clients


@pytest.mark.simulation
def test_attacking_masked_vectors_on_the_wire_recovers_nothing(tmp_path):
    from fedsim.engine.lifecycle.runner import run_experiment

    config = tiny_config(
        name="masked",
        data={"max_train_samples": 2, "image_size": 32},  # an 8-px image matches noise by chance (SSIM 0.36 seen)
        strategy={"name": "secagg+"},
        adversary={"tap": "mitm", "targets": "per-client", "attacks": [{"name": "dlg", "iterations": 30, "restarts": 2}]},
        output={"dir": str(tmp_path), "run_name": "run"},
    )
    attacks = rows(RunStore(run_experiment(config, quiet=True)), "attack")
    assert sorted(r["target"] for r in attacks) == ["client:0", "client:1"]
    for row in attacks:
        assert row["tap"] == "mitm" and row["status"] == "ok" and row["batch_size"] == 1
        assert row["ssim_mean"] < 0.2 and row["psnr_mean"] < 12
