"""Scoring a reconstruction: image space, label pairing, strict JSON rows, LPIPS in the score, trajectories."""

import json

import pytest
import torch
from image_pairs import _pair

from adversary.view import Reconstruction, TrajectoryPoint
from fedsim.data.normalization import ChannelStats
from fedsim.judge import metrics
from fedsim.judge.scoring import (
    PSNR_CAP_DB,
    AttackScore,
    multiset_label_accuracy,
    score_reconstruction,
    score_trajectory,
)


def _reconstruction(images_, labels, trajectory=()):
    return Reconstruction(
        images=images_,
        labels=labels,
        objective=0.25,
        restart_objectives=(0.25, 0.5),
        iterations=30,
        seconds=1.5,
        trajectory=tuple(trajectory),
    )


def test_label_accuracy():
    assert metrics.label_accuracy(torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 0, 4])) == 0.75
    assert multiset_label_accuracy(torch.tensor([3, 1, 1]), torch.tensor([1, 3, 2])) == pytest.approx(2 / 3)
    assert multiset_label_accuracy(torch.tensor([1, 1]), torch.tensor([1, 2, 1])) == pytest.approx(2 / 3)


def test_scoring_maps_to_image_space_and_pairs_labels():
    stats = ChannelStats(mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3))
    truth, _ = _pair(4, 3, 8, seed=4)
    truth_labels = torch.tensor([7, 1, 7, 3])
    permutation = torch.tensor([2, 3, 0, 1])
    recovered = stats.normalize(truth[permutation])
    recovered[1] = stats.normalize(truth[3] * 0.9)  # reconstruction 1 pairs with truth 3, imperfectly
    rec_labels = torch.tensor([7, 3, 7, 9])  # truth labels of the permutation but the last one wrong
    score = score_reconstruction(_reconstruction(recovered, rec_labels), truth, truth_labels, stats.denormalize, None)
    assert score.pairing == "hungarian-mse"
    assert list(score.truth_index) == [0, 1, 2, 3] and list(score.rec_index) == [2, 3, 0, 1]
    assert score.label_accuracy == 0.75  # reconstruction 3 (label 9) is paired with truth 1 (label 1)
    assert score.label_accuracy_multiset == 0.75
    # normalize -> denormalize round-trips up to float32 rounding: near-exact pairs, one clearly worse
    assert min(score.psnr[:3]) > 100 and score.psnr[3] < 40
    assert score.ssim[0] == pytest.approx(1.0) and score.mse[3] > 1e-4
    assert score.lpips is None and score.lpips_mean is None
    assert (score.objective, score.iterations, score.seconds) == (0.25, 30, 1.5)


def test_scoring_clamps_reconstructions_to_image_range():
    truth = torch.ones(1, 1, 8, 8)
    recovered = torch.full((1, 1, 8, 8), 3.0)  # brighter than white: clamped, so an exact match
    identity = ChannelStats(mean=(0.0,), std=(1.0,))
    score = score_reconstruction(
        _reconstruction(recovered, torch.tensor([0])), truth, torch.tensor([0]), identity.denormalize
    )
    assert score.mse == (0.0,) and score.psnr_mean == PSNR_CAP_DB and score.psnr_exact == 1


def test_truth_outside_image_space_is_refused():
    identity = ChannelStats(mean=(0.0,), std=(1.0,))
    recovered = torch.zeros(1, 1, 8, 8)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        score_reconstruction(
            _reconstruction(recovered, torch.tensor([0])), recovered - 2.0, torch.tensor([0]), identity.denormalize
        )


def test_to_row_is_strict_json():
    truth, noisy = _pair(3, 1, 8, seed=5)
    recovered = torch.cat([truth[:1], noisy[1:]])  # one exact pair: PSNR inf
    labels = torch.tensor([0, 1, 2])
    identity = ChannelStats(mean=(0.0,), std=(1.0,))
    reconstruction = Reconstruction(
        images=recovered,
        labels=labels,
        objective=float("nan"),
        restart_objectives=(float("nan"),),
        iterations=3,
        seconds=0.1,
    )
    score = score_reconstruction(reconstruction, truth, labels, identity.denormalize)
    assert isinstance(score, AttackScore)
    row = json.loads(json.dumps(score.to_row(), allow_nan=False))
    assert row["psnr"][0] is None and row["psnr_exact"] == 1 and row["objective"] is None
    assert row["psnr_mean"] == pytest.approx(
        (PSNR_CAP_DB + sum(score.psnr[1:])) / 3
    )  # the exact pair counts at the cap
    assert row["lpips"] is None and row["pairing"] == "hungarian-mse"


def test_lpips_scores_flow_into_the_attack_score():
    truth, noisy = _pair(2, 3, 32, seed=6)
    identity = ChannelStats(mean=(0.0,) * 3, std=(1.0,) * 3)
    labels = torch.tensor([0, 1])
    lpips = metrics.Lpips(random_weights_for_tests=True)
    score = score_reconstruction(_reconstruction(noisy, labels), truth, labels, identity.denormalize, lpips)
    assert len(score.lpips) == 2 and score.lpips_mean == pytest.approx(sum(score.lpips) / 2)


def test_trajectory_scoring_gives_one_row_per_point():
    truth, noisy = _pair(2, 1, 8, seed=7)
    identity = ChannelStats(mean=(0.0,), std=(1.0,))
    points = [
        TrajectoryPoint(0, 2.0, torch.rand(2, 1, 8, 8)),
        TrajectoryPoint(10, 0.5, noisy),
        TrajectoryPoint(20, 0.0, truth.flip(0)),
    ]
    rows = score_trajectory(_reconstruction(truth, torch.tensor([0, 1]), points), truth, identity.denormalize)
    assert [row["iteration"] for row in rows] == [0, 10, 20]
    assert (
        rows[1]["psnr"] > rows[0]["psnr"] and rows[2]["psnr"] == PSNR_CAP_DB and rows[2]["ssim"] == pytest.approx(1.0)
    )
    json.dumps(rows, allow_nan=False)
