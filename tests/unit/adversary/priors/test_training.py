"""`fedsim prior train`: a diffusers folder trained on images no client holds, loadable as a ggssr prior."""

from __future__ import annotations

import pytest
import torch

from adversary.inversion import AttackOptions, run_attack
from adversary.priors.training import image_hashes, read_record, train_prior

pytest.importorskip("diffusers")


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
    from linear_views import linear_view

    data, folder = trained
    x, y = torch.from_numpy(data.x_train[:1]), torch.from_numpy(data.y_train[:1])
    options = AttackOptions(name="ggssr", steps=3, prior={"name": "diffusers", "path": str(folder), "offline": True})
    rec = run_attack(options, [linear_view(x, y)], seed=0, device=torch.device("cpu"))[0]
    assert rec.images.shape == x.shape and torch.isfinite(rec.images).all()


@pytest.mark.parametrize("steps", [0, -5])
def test_a_step_count_below_one_trains_nothing(tmp_path, steps):
    images = torch.rand(4, 1, 8, 8).numpy()
    with pytest.raises(ValueError, match=rf"^steps = {steps}: at least 1"):
        train_prior(images, tmp_path / "prior", dataset="digits", split="test", steps=steps, progress=False)
    assert not (tmp_path / "prior").exists()


def test_a_malicious_pickle_as_training_state_is_one_line_and_runs_nothing(tmp_path):
    from malicious_pickles import assert_really_malicious, save_malicious

    from adversary.priors.training import STATE
    from fedsim.models import ModelError

    assert_really_malicious(tmp_path)
    folder, sentinel = tmp_path / "prior", tmp_path / "code-ran"
    folder.mkdir()
    save_malicious(folder / STATE, sentinel, step=torch.tensor(1))
    images = torch.rand(4, 1, 8, 8).numpy()
    with pytest.raises(ModelError, match=rf"{STATE}.*holds objects other than tensors") as error:
        train_prior(images, folder, dataset="digits", split="test", steps=2, resume=True, progress=False)
    assert "\n" not in str(error.value) and str(folder / STATE) in str(error.value)
    assert not sentinel.exists()
