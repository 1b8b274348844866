"""SecAgg+ in a real federation: the aggregate is FedAvg's within the quantisation error, and no tap sees a
client's update."""

from __future__ import annotations

import pytest
from secagg_rounds import rows
from tiny_configs import TRAINING, merged, tiny_config

from fedsim.config import parse_config
from fedsim.rundir.writer import RunStore

pytestmark = pytest.mark.usefixtures("task_identity")  # messages built outside a Flower run (conftest.py)


SIMULATED = merged(
    TRAINING,
    name="secagg",
    federation={"num_clients": 5, "failures": [{"round": 2, "client": 1}]},
    # batches of 4: the attacked aggregate holds 80 images, not 320 (its null's pairings grow with the cube of that)
    client={"batch_size": 4, "defenses": [{"name": "noise", "sigma": 0.001}]},  # noise seeded per (round, client)
)


@pytest.fixture(scope="module")
def fedavg_and_secagg(tmp_path_factory) -> tuple[RunStore, RunStore]:
    """The same federation and seed under FedAvg and SecAgg+ (server tap on round 2); client 1 fails in round 2."""
    from fedsim.engine.run import run_experiment

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
    first = {
        n: secagg.load_checkpoint(1)[n].double() - fedavg.load_checkpoint(1)[n].double()
        for n in fedavg.load_checkpoint(1)
    }
    error = max(float(d.abs().max()) for d in first.values())
    assert 0 < error <= 5 * step / weights  # the same updates, summed securely: off by the quantisation only

    # Round 2: client 1 fails while training, in its masked-vector stage; the other four are summed.
    dropped = {r["client"]: r for r in rows(secagg, "fit", 2)}[1]
    assert dropped["status"] == "failed" and dropped["dropped_at"] == "collect_masked_vectors"
    assert "InjectedFailure" in dropped["error"]
    assert (evals[2]["clients_ok"], evals[2]["clients_failed"], evals[2]["secagg_dropped"]) == (4, 1, [1])
    second = max(
        float((secagg.load_checkpoint(2)[n].double() - fedavg.load_checkpoint(2)[n].double()).abs().max())
        for n in first
    )
    assert second < 1e-3
    for a, b in zip(rows(fedavg, "eval"), evals):  # what the quantisation and clipping cost in accuracy
        assert abs(a["accuracy"] - b["accuracy"]) <= 0.01


@pytest.mark.simulation
def test_the_server_tap_never_gets_a_client_update_under_secagg(fedavg_and_secagg):
    _, secagg = fedavg_and_secagg
    attacks = rows(secagg, "attack")
    assert [(r["tap"], r["target"], r["status"]) for r in attacks] == [("server", "aggregate", "ok")]  # targets: both
    fits = {r["client"]: r["num_examples"] for r in rows(secagg, "fit", 2) if r["status"] == "ok"}
    assert attacks[0]["batch_size"] == sum(min(n, 4 * 5) for n in fits.values())  # clear counts, 4 clients


@pytest.mark.simulation
def test_attacking_masked_vectors_on_the_wire_recovers_nothing(tmp_path):
    from fedsim.engine.run import run_experiment

    config = tiny_config(
        name="masked",
        data={"max_train_samples": 2, "image_size": 32},  # an 8-px image matches noise by chance (SSIM 0.36 seen)
        strategy={"name": "secagg+"},
        adversary={
            "tap": "mitm",
            "targets": "per-client",
            "attacks": [{"name": "dlg", "iterations": 30, "restarts": 2}],
        },
        output={"dir": str(tmp_path), "run_name": "run"},
    )
    attacks = rows(RunStore(run_experiment(config, quiet=True)), "attack")
    assert sorted(r["target"] for r in attacks) == ["client:0", "client:1"]
    for row in attacks:
        assert row["tap"] == "mitm" and row["status"] == "ok" and row["batch_size"] == 1
        assert row["ssim_mean"] < 0.2 and row["psnr_mean"] < 12
