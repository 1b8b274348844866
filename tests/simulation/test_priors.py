"""A run whose ggssr attack is guided by a prior trained with `fedsim prior train`."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("diffusers")


@pytest.mark.simulation
def test_a_run_attacking_with_a_trained_prior_writes_attack_rows(trained, tmp_path):
    from tiny_configs import tiny_config

    from fedsim.engine.run import run_experiment
    from fedsim.rundir.writer import RunStore

    _, folder = trained
    config = tiny_config(
        name="ggssr",
        data={"max_train_samples": 4},
        output={"dir": str(tmp_path)},
        adversary={
            "attacks": [
                {"name": "ggssr", "steps": 4, "prior": {"name": "diffusers", "path": str(folder), "offline": True}}
            ],
            "save_images": False,
        },
    )
    rows = RunStore(run_experiment(config, quiet=True)).rows()
    attacks = [row for row in rows if row["event"] == "attack"]
    assert attacks and all(row["attack"] == "ggssr" and row["status"] == "ok" for row in attacks)
    assert all(math.isfinite(row["psnr_mean"]) for row in attacks)
