"""Fixtures shared by test files: one tiny real sweep, run once per session (Ray simulations are slow), and a
TaskIdentity for Flower messages built outside a Flower run. Small configs: tests/helpers/tiny_configs.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from adversary.priors.training import train_prior
from fedsim.config import DataConfig
from fedsim.data import load_dataset

from tiny_configs import tiny_raw


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    data = load_dataset(DataConfig(dataset="digits", image_size=8), seed=0)
    folder = tmp_path_factory.mktemp("prior")
    train_prior(data.x_test, folder, dataset="digits", split="test", steps=3, progress=False, checkpoint_every=2)
    return data, folder


TINY_SWEEP = tiny_raw(
    name="tiny",
    data={"max_train_samples": 40, "max_test_samples": 60},
    adversary={"targets": "both", "attacks": [{"name": "dlg", "iterations": 10, "restarts": 1}]},
    sweep={"grid": {"client.defenses": {"none": [], "noise": [{"name": "noise", "sigma": 0.1}]}}},
)


@pytest.fixture(autouse=True)
def no_lpips_download(monkeypatch):
    """Tests never fetch LPIPS' AlexNet (233 MB): in this process a download fails as it does offline."""
    from adversary import metrics

    monkeypatch.setattr(metrics, "download_alexnet", lambda path: "download skipped in tests")


@pytest.fixture
def task_identity(monkeypatch):
    """Messages are stamped with the run and node of the process; outside a Flower run there is none."""
    from flwr.supercore.task_identity import TaskIdentity

    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 1)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory) -> Path:
    """Two one-round runs (no defense, noise) on 2 clients of digits, attacked per client and as the
    aggregate by a short DLG, run two at a time in worker processes. Returns the sweep directory."""
    from fedsim.sweep import plan_sweep, run_sweep

    root = tmp_path_factory.mktemp("sweep")
    config = root / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY_SWEEP, sort_keys=False))
    plan = plan_sweep(config, out=root / "tiny-sweep")
    outcomes = run_sweep(plan, parallel=2, cpus=2, quiet=True)
    assert [outcome.status for outcome in outcomes] == ["complete", "complete"], outcomes
    return plan.sweep_dir
