"""Defenses in a live Flower federation: a chain of them runs every round, records what it did, and the
man-in-the-middle sees the update exactly as the last defense shaped it."""

import pytest
import torch

import adversary.adversary as adversary_module
from fedsim.rundir.writer import RunStore
from fedsim.engine.lifecycle.runner import run_experiment
from tiny_configs import tiny_config

pytestmark = pytest.mark.simulation

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
        adversary={"tap": "mitm", "targets": "per-client", "rounds": [2], "attacks": [{"name": "dlg", "iterations": 3}]},
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
