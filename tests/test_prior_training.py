"""`fedsim prior train`: a diffusers folder trained on images no client holds, loadable as a ggssr prior."""

from __future__ import annotations

import math

import pytest
import torch

from adversary.inversion import AttackOptions, run_attack
from adversary.priors.training import image_hashes, read_record, train_prior
from fedsim.config import DataConfig
from fedsim.data import load_dataset

pytest.importorskip("diffusers")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    data = load_dataset(DataConfig(dataset="digits", image_size=8), seed=0)
    folder = tmp_path_factory.mktemp("prior")
    train_prior(data.x_test, folder, dataset="digits", split="test", steps=3, progress=False, checkpoint_every=2)
    return data, folder


def test_the_prior_is_trained_on_images_no_client_holds(trained):
    data, folder = trained
    record = read_record(folder)
    assert record["split"] == "test" and record["images"] == len(data.x_test)
    client_images = set(image_hashes(data.x_train))  # every client partition is drawn from the training split
    assert client_images.isdisjoint(record["image_sha256"])
    assert set(record["image_sha256"]) == set(image_hashes(data.x_test))


def test_training_resumes_from_its_checkpoint(trained):
    data, folder = trained
    assert read_record(folder)["trained_steps"] == 3
    train_prior(data.x_test, folder, dataset="digits", split="test", steps=5, resume=True, progress=False)
    assert read_record(folder)["trained_steps"] == 5


def test_a_trained_folder_is_a_ggssr_prior(trained):
    from test_ggssr import linear_view

    data, folder = trained
    x, y = torch.from_numpy(data.x_train[:1]), torch.from_numpy(data.y_train[:1])
    options = AttackOptions(name="ggssr", steps=3, prior={"name": "diffusers", "path": str(folder), "offline": True})
    rec = run_attack(options, [linear_view(x, y)], seed=0, device=torch.device("cpu"))[0]
    assert rec.images.shape == x.shape and torch.isfinite(rec.images).all()


@pytest.mark.simulation
def test_a_run_attacking_with_a_trained_prior_writes_attack_rows(trained, tmp_path):
    from tiny_configs import tiny_config

    from fedsim.engine.lifecycle.runner import run_experiment
    from fedsim.rundir.writer import RunStore

    _, folder = trained
    config = tiny_config(
        name="ggssr", data={"max_train_samples": 4}, output={"dir": str(tmp_path)},
        adversary={"attacks": [{"name": "ggssr", "steps": 4, "prior": {"name": "diffusers", "path": str(folder),
                                                                       "offline": True}}], "save_images": False},
    )  # fmt: skip
    rows = RunStore(run_experiment(config, quiet=True)).rows()
    attacks = [row for row in rows if row["event"] == "attack"]
    assert attacks and all(row["attack"] == "ggssr" and row["status"] == "ok" for row in attacks)
    assert all(math.isfinite(row["psnr_mean"]) for row in attacks)
