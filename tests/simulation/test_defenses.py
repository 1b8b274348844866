"""Defenses in a live Flower federation: a chain of them runs every round, records what it did, and the
man-in-the-middle sees the update exactly as the last defense shaped it; DP-SGD clients keep a ledger each and
report a growing epsilon; client-side central DP records its noise and epsilon."""

import math

import numpy as np
import pytest
import torch
from dp_training import dpsgd
from tiny_configs import TRAINING, merged, tiny_config

import adversary.adversary as adversary_module
from clients.defenses.privacy_ledger import ClientPrivacyLedger
from fedsim.config import parse_config
from fedsim.engine.run import run_experiment
from fedsim.rundir.writer import RunStore

pytestmark = [
    pytest.mark.simulation,
    # Opacus' hook on the first layer, whose input needs no gradient; clients.defenses.dpsgd silences it too
    pytest.mark.filterwarnings("ignore:Full backward hook is firing"),
    pytest.mark.usefixtures("task_identity"),  # messages built outside a Flower run (conftest.py)
]


CHAIN = [
    {"name": "gradient_dropout", "p": 0.6, "sigma": 5e-3},
    {"name": "soteria", "ratio": 0.5},
    {"name": "prune", "ratio": 0.5},
]


def test_a_chain_of_defenses_runs_two_rounds_and_the_wire_carries_its_output(tmp_path, monkeypatch):
    seen = []
    build_views = adversary_module.build_views

    def spy(updates, *args, **kwargs):
        views = build_views(updates, *args, **kwargs)
        seen.extend(views)
        return views

    monkeypatch.setattr(adversary_module, "build_views", spy)  # the driver process hosts the taps
    config = tiny_config(
        name="defended",
        seed=2,
        data={"max_train_samples": 40},
        model={"activation": "sigmoid", "init": "default"},
        federation={"rounds": 2},
        client={"batch_size": 8, "defenses": CHAIN},
        adversary={
            "tap": "mitm",
            "targets": "per-client",
            "rounds": [2],
            "attacks": [{"name": "dlg", "iterations": 3}],
        },
        output={"dir": str(tmp_path), "run_name": "run"},
    )
    run_dir = run_experiment(config, quiet=True)
    rows = list(RunStore(run_dir).rows())

    fits = [row for row in rows if row["event"] == "fit"]
    assert len(fits) == 4 and all(row["status"] == "ok" for row in fits)
    for row in fits:
        assert row["defense.gradient_dropout.fraction_kept"] == pytest.approx(0.6, abs=0.05)
        assert row["defense.soteria.units_pruned"] == row["defense.soteria.units"] / 2
        assert row["defense.prune.fraction_zero"] == pytest.approx(0.5, abs=1e-4)
        assert row["defense.prune.norm_before"] == pytest.approx(row["defense.soteria.norm_after"])
    evals = [row for row in rows if row["event"] == "eval"]
    assert [row["round"] for row in evals] == [0, 1, 2] and all(row["model_updated"] for row in evals[1:])

    assert sorted(view.target for view in seen) == ["client:0", "client:1"]
    for view in seen:
        tapped = torch.cat([delta.reshape(-1) for delta in view.parameter_delta().values()])
        assert (tapped == 0).double().mean().item() == pytest.approx(0.5, abs=1e-4)  # what prune sent
    assert sorted(row["target"] for row in rows if row["event"] == "attack") == ["client:0", "client:1"]


@pytest.mark.simulation
def test_dpsgd_in_a_federation_reports_growing_epsilon_per_client_and_keeps_a_ledger_each(tmp_path):
    from fedsim.engine.run import run_experiment
    from fedsim.rundir.ground_truth import GroundTruthStore
    from fedsim.rundir.writer import RunStore

    config = tiny_config(
        data={"max_train_samples": 60, "normalize": "global"},
        model={
            "name": "convnet",
            "width": 4,
            "init": "default",
        },  # BatchNorm: built with GroupNorm by server, clients and adversary
        federation={"rounds": 2},
        client={
            "batch_size": 6,
            "local_steps": 3,
            "defenses": [dpsgd(noise_multiplier=1.0, fix_model=True), {"name": "clip", "max_norm": 10.0}],
        },
        adversary={"tap": "mitm", "rounds": [2], "attacks": [{"name": "dlg", "iterations": 2}]},
        output={"dir": str(tmp_path), "run_name": "run"},
    )
    run_dir = run_experiment(config, quiet=True)
    rows = list(RunStore(run_dir).rows())
    fits = [row for row in rows if row["event"] == "fit"]
    assert len(fits) == 4 and all(row["status"] == "ok" for row in fits)
    for partition in (0, 1):
        mine = sorted((row for row in fits if row["client"] == partition), key=lambda row: row["round"])
        assert 0 < mine[0]["defense.dpsgd.epsilon"] < mine[1]["defense.dpsgd.epsilon"] < math.inf
        assert mine[1]["defense.dpsgd.total_steps"] == 6 and "defense.clip.norm_before" in mine[1]
        assert [entry.round for entry in ClientPrivacyLedger(run_dir / "clients" / str(partition)).entries] == [1, 2]
        assert len(GroundTruthStore(run_dir).read(2, partition)["batches"]) == 3
    attacks = [row for row in rows if row["event"] == "attack"]
    assert {row["target"] for row in attacks} == {"client:0", "client:1"}
    assert all(row["status"] == "ok" for row in attacks)  # the adversary loads the GroupNorm architecture too


@pytest.mark.simulation
def test_a_federation_under_client_side_dp_records_noise_and_epsilon(tmp_path):
    from fedsim.engine.run import run_experiment
    from fedsim.rundir.writer import RunStore

    raw = merged(
        TRAINING,
        name="dp",
        strategy={"dp": {"kind": "client-fixed", "noise_multiplier": 0.5, "clipping_norm": 2.0, "delta": 1e-3}},
        output={"dir": str(tmp_path), "run_name": "dp"},
    )
    rows = RunStore(run_experiment(parse_config(raw), quiet=True)).rows()
    fits = [row for row in rows if row["event"] == "fit"]
    assert len(fits) == 6 and all(row["status"] == "ok" for row in fits)  # the clipping mod let every reply through
    evals = [row for row in rows if row["event"] == "eval"]
    assert [row["round"] for row in evals] == [0, 1, 2] and "dp_epsilon" not in evals[0]
    for row in evals[1:]:
        assert row["model_updated"] and row["dp_mechanism"] == "client-fixed" and row["dp_accountant"] == "opacus-rdp"
        assert row["dp_clipping_norm"] == 2.0 and row["dp_noise_std"] == pytest.approx(0.5 * 2.0 / 3)
        assert row["dp_delta"] == 1e-3 and row["dp_sample_rate"] == 1.0
        assert row["dp_noise_multiplier"] == pytest.approx(0.5)  # fixed denominator: unequal partitions do not matter
        assert np.isfinite(row["accuracy"])
    assert 0 < evals[1]["dp_epsilon"] < evals[2]["dp_epsilon"] < math.inf
