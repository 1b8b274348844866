"""Tuning on public problems: what is searched, that the attack's own settings are trial 0, that a better setting
is found where the published one fails, and that a setting is tuned once and then read from the cache."""

from __future__ import annotations

import pytest
import torch
from digit_views import CPU, client_view, lenet, one_per_class

from adversary.inversion import tuning as tuning_module
from adversary.inversion.tuning import (
    PublicProblems,
    SearchRange,
    TuningTask,
    current_values,
    search_space,
    tune,
    tuned,
    with_params,
)
from fedsim.config import AttackOptions
from fedsim.judge.scoring import public_ssim


def test_the_search_covers_regularizer_weights_step_size_and_init_scale_around_the_attacks_own():
    ig = AttackOptions(name="ig", regularizers=[{"name": "tv", "weight": 0.1}], optimizer="adam", lr=0.1)
    space = search_space(ig)
    assert space["regularizers.tv.weight"] == SearchRange(pytest.approx(1e-5), pytest.approx(1.0))
    assert space["lr"] == SearchRange(pytest.approx(0.01), pytest.approx(1.0))
    assert set(space) == {"regularizers.tv.weight", "lr", "init_scale"}
    lbfgs = AttackOptions(name="dlg", preset="paper-003")
    assert search_space(lbfgs)["lr"].high == lbfgs.lr  # L-BFGS steps above its own diverge
    assert "regularizers.tv.weight" not in search_space(lbfgs)  # TV off stays off
    assert search_space(AttackOptions(name="rtf")) == {}  # closed form: nothing to tune


def test_tuned_values_replace_the_attacks_own_and_read_back():
    ig = AttackOptions(name="ig", regularizers=[{"name": "tv", "weight": 0.1}], optimizer="adam", lr=0.1)
    params = {"regularizers.tv.weight": 0.004, "lr": 0.03, "init_scale": 0.5}
    changed = with_params(ig, params)
    assert current_values(changed) == pytest.approx(params)
    assert changed.tv_weight == pytest.approx(0.004) and ig.tv_weight == pytest.approx(0.1)  # a copy


@pytest.fixture(scope="module")
def public_problem(digits) -> PublicProblems:
    x, y = digits
    (index,) = one_per_class(y, [3], pick=5)
    images, labels = x[index : index + 1], y[index : index + 1]
    view = client_view(lenet(seed=1), images, labels, lr=0.1)
    return PublicProblems([view], [images], [labels], mean=(0.0,), std=(1.0,), score=public_ssim)


def task_for(problems: PublicProblems, tmp_path, trials: int = 6, **setting) -> TuningTask:
    return TuningTask(problems, trials=trials, seed=0, setting=setting or {"data": "digits"}, cache_dir=str(tmp_path))


def blurring_ig() -> AttackOptions:
    """Inverting Gradients whose TV weight drowns the data term: its own settings reconstruct a smudge."""
    return AttackOptions(
        name="ig", iterations=60, optimizer="adam", lr=0.1, regularizers=[{"name": "tv", "weight": 30.0}]
    )


def test_tuning_finds_a_better_setting_where_the_published_one_fails_and_never_a_worse_one(public_problem, tmp_path):
    tuning = tune(blurring_ig(), task_for(public_problem, tmp_path), CPU)
    assert tuning is not None and tuning.trials == 6 and tuning.problems == 1
    assert tuning.defaults["regularizers.tv.weight"] == 30.0  # trial 0 ran the attack's own settings
    assert tuning.ssim_tuned > tuning.ssim_default + 0.05
    assert tuning.params["regularizers.tv.weight"] < 30.0
    row = tuning.to_row()
    assert row["tuned"] is True and row["tuning_params"] == tuning.params and row["tuning_cached"] is False


def test_a_setting_is_tuned_once_then_read_from_the_cache(public_problem, tmp_path, monkeypatch):
    first = tune(blurring_ig(), task_for(public_problem, tmp_path, trials=2), CPU)
    tuning_module._CACHES.clear()  # a new process: only the folder remains

    def no_attack(*args, **kwargs):
        raise AssertionError("a cached setting must not run the attack again")

    monkeypatch.setattr(tuning_module, "run_attack", no_attack)
    again = tune(blurring_ig(), task_for(public_problem, tmp_path, trials=2), CPU)
    assert again is not None and again.cached and again.params == first.params and again.key == first.key
    with pytest.raises(AssertionError, match="must not run"):  # another setting is another key
        tune(blurring_ig(), task_for(public_problem, tmp_path, trials=2, data="cifar10"), CPU)


def test_an_attack_whose_tuning_fails_runs_with_its_own_settings(public_problem, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(tuning_module, "tune", broken)
    options = blurring_ig()
    assert tuned(options, task_for(public_problem, tmp_path), CPU) == (options, None)
    assert tuned(options, None, CPU) == (options, None)


def test_public_problems_are_scored_in_image_space(public_problem):
    view, truth = public_problem.views[0], public_problem.images[0]
    from adversary.view import Reconstruction

    exact = Reconstruction(truth.clone(), public_problem.labels[0], 0.0, (0.0,), 1, 0.0)
    blank = Reconstruction(torch.zeros_like(truth), public_problem.labels[0], 0.0, (0.0,), 1, 0.0)
    assert public_problem.mean_ssim([exact]) == pytest.approx(1.0)
    assert public_problem.mean_ssim([blank]) < 0.5
    assert view.num_samples == 1
