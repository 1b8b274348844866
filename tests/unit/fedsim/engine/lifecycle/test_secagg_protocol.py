"""`strategy.name: secagg+`: Flower's real SecAgg+ protocol, its config, drop-outs and what each tap sees.

Most checks run the real protocol (SecAggPlusWorkflow on the server, secaggplus_mod and fedsim's mods on
the clients) through ``InProcessGrid``, a transport that hands each message, serialised and parsed as on
the wire, to a ClientApp in a thread of this process: a round takes well under a second. The clients
there are ``FixedUpdateClient``s, whose updates are known exactly. The `simulation` tests run the whole
thing in Flower's Ray simulation with fedsim's real training.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import Context, RecordDict
from flwr.client import NumPyClient
from flwr.clientapp import ClientApp
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from in_process_grid import InProcessGrid
from secagg_rounds import rows, secagg_config

from adversary.secagg_taps import LegacyStrategyTap, MaskedWireTap
from adversary.taps import AGGREGATE
from clients.legacy_client import secagg_client_mods
from fedsim.core import messaging
from fedsim.engine.assembly import client_spec_of, server_settings_of, strategy_of
from fedsim.engine.lifecycle.progress import LogProgress
from fedsim.engine.lifecycle.rounds import ServerSpec, run_rounds
from fedsim.engine.lifecycle.secagg_protocol import SecAggPlusParameters, SecAggRounds
from fedsim.rundir.writer import RunStore

pytestmark = pytest.mark.usefixtures("task_identity")  # messages built outside a Flower run (conftest.py)


GLOBAL = {"w": torch.linspace(-1.0, 1.0, 400).reshape(20, 20), "b": torch.zeros(20), "steps": torch.tensor(7)}
LAYOUT = {name: tuple(value.shape) for name, value in GLOBAL.items()}
FIRST_NODE = 100


# ----------------------------------------------------------------------------------------- harness


def update_of(partition: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(partition)
    return {
        name: (
            0.1 * torch.randn(value.shape, generator=generator)
            if value.is_floating_point()
            else torch.tensor(partition)
        )
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


def run_protocol(
    config, tmp_path: Path, *, server_sink=None, wire_sink=None, start_round=0, start_state=GLOBAL, silent=None
):
    """Run the rounds of ``config`` after ``start_round`` through the real protocol in-process; returns
    (store, grid). ``silent``: (monkeypatch, partitions) whose clients fall silent, read on a reply clock that
    times them out, and only them, whatever the machine's load."""
    num_clients = config.federation.num_clients
    spec = client_spec_of(
        config,
        tmp_path,
        partitions=tuple(np.arange(examples_of(p)) for p in range(num_clients)),
        stats=(),
        num_classes=2,
        channels=1,
        image_size=4,
    )
    app = ClientApp(
        client_fn=lambda context: FixedUpdateClient(config, int(context.node_config["partition-id"])).to_client(),
        mods=secagg_client_mods(spec),
    )
    grid = InProcessGrid(app, range(num_clients), FIRST_NODE)
    if silent is not None:
        monkeypatch, partitions = silent
        monkeypatch.setattr(messaging, "now", grid.clock_past_deadlines_once_only(FIRST_NODE + p for p in partitions))
    store = RunStore.create(config, "cpu", tmp_path / "run")
    strategy = strategy_of(config)
    if server_sink is not None:
        strategy = LegacyStrategyTap(strategy, server_sink, LAYOUT)
    server = ServerSpec(
        settings=server_settings_of(config),
        store=store,
        strategy=strategy,
        initial_state=start_state,
        start_round=start_round,
        evaluate=lambda state: {"accuracy": 0.0},
        progress=LogProgress(),
        wrap_grid=(lambda g: MaskedWireTap(g, wire_sink, LAYOUT)) if wire_sink is not None else None,
    )
    parameters = SecAggPlusParameters.of(
        config.strategy.secagg, config.federation, largest_partition=examples_of(num_clients - 1)
    )
    main_grid = server.wrap_grid(grid) if server.wrap_grid else grid
    rounds = SecAggRounds(strategy, parameters, config.seed, config.federation.rounds)
    run_rounds(
        server, rounds, main_grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})
    )
    return store, grid


def fedavg_of(partitions: list[int], start: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    weights = torch.tensor([float(examples_of(p)) for p in partitions], dtype=torch.float64)
    return {
        name: start[name].double()
        + sum(w * update_of(p)[name].double() for w, p in zip(weights, partitions)) / weights.sum()
        for name in start
    }


def quantisation_bound(config, partitions: list[int]) -> float:
    """Largest error of SecAgg+'s mean: each client's stochastic rounding is off by < one step, in weighted units."""
    secagg = config.strategy.secagg
    step = 2 * secagg.clipping_range / secagg.quantization_range
    max_weight = examples_of(config.federation.num_clients - 1)
    return len(partitions) * step / sum(examples_of(p) / max_weight for p in partitions)


# ------------------------------------------------------------------------------------------ config


@pytest.mark.parametrize(
    ("clients", "secagg"),
    [(2, {}), (5, {}), (5, {"num_shares": 3, "reconstruction_threshold": 2}), (5, {"reconstruction_threshold": 5})],
)
def test_flower_runs_the_protocol_with_exactly_the_configured_integers(tmp_path, clients, secagg):
    config = secagg_config(num_clients=clients, **secagg)
    store, grid = run_protocol(config, tmp_path)
    setup = [m for m in grid.sent if m.content.config_records.get(RECORD_KEY_CONFIGS, {}).get(Key.STAGE) == Stage.SETUP]
    resolved = SecAggPlusParameters.of(config.strategy.secagg, config.federation, examples_of(clients - 1))
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


@pytest.mark.parametrize("clipping_range", [8.0, 64.0])
def test_the_noise_the_server_predicts_for_its_aggregate_is_the_noise_flower_puts_in(tmp_path, clipping_range):
    # the attacker's noise model (DAGER's update_noise) from the public parameters and the counts in clear,
    # against the measured error of the aggregate Flower's quantisation and unmasking released
    config = secagg_config(clipping_range=clipping_range)
    seen: list = []
    run_protocol(config, tmp_path, server_sink=seen.append)
    (aggregate,) = seen
    expected = fedavg_of(list(range(5)), GLOBAL)
    error = torch.cat([(aggregate.observed_state[n].double() - expected[n]).ravel() for n in ("w", "b")])
    parameters = SecAggPlusParameters.of(config.strategy.secagg, config.federation, examples_of(4))

    predicted = parameters.aggregate_noise(aggregate.contributor_examples)

    assert abs(float(error.mean())) < 0.25 * predicted  # unbiased (the mean of 420: to about 5%)
    assert float(error.std()) == pytest.approx(predicted, rel=0.15)  # the std of 420 entries: to about 4%


def test_a_resumed_secagg_run_repeats_the_uninterrupted_one_exactly(tmp_path):
    failures = [{"round": 2, "client": 0, "stage": "share_keys"}]
    whole, _ = run_protocol(secagg_config(rounds=2, failures=failures), tmp_path / "whole")
    resumed, _ = run_protocol(
        secagg_config(rounds=2, failures=failures),
        tmp_path / "resumed",
        start_round=1,
        start_state=whole.load_checkpoint(1),
    )
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
        in_sum = [
            c for c in range(5) if c != dropped or stage == "unmask"
        ]  # an unmask drop-out already sent its vector
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


def test_a_client_that_stops_answering_is_dropped_after_the_timeout(tmp_path, monkeypatch):
    failures = [{"round": 1, "client": 3, "stage": "share_keys", "kind": "hang"}]
    store, _ = run_protocol(secagg_config(failures=failures, timeout=1.0), tmp_path, silent=(monkeypatch, [3]))
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
