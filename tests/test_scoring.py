"""Scoring outside the attack: metrics against skimage, Hungarian pairing, LPIPS availability, figures."""

import hashlib
import json
import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from skimage.metrics import mean_squared_error, peak_signal_noise_ratio, structural_similarity

from adversary import images, metrics
from adversary.matching import pair_by_mse
from adversary.scoring import PSNR_CAP_DB, AttackScore, multiset_label_accuracy, score_reconstruction, score_trajectory
from adversary.view import Reconstruction, TrajectoryPoint
from fedsim.data.normalization import ChannelStats


def _pair(n, c, side, seed=0):
    generator = torch.Generator().manual_seed(seed)
    a = torch.rand(n, c, side, side, generator=generator)
    b = (a + 0.1 * torch.randn(n, c, side, side, generator=generator)).clamp(0, 1)
    return a, b


def _reconstruction(images_, labels, trajectory=()):
    return Reconstruction(
        images=images_, labels=labels, objective=0.25, restart_objectives=(0.25, 0.5), iterations=30,
        seconds=1.5, trajectory=tuple(trajectory),
    )


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("side", [8, 32])
def test_metrics_agree_with_skimage(channels, side):
    a, b = _pair(3, channels, side, seed=side + channels)
    got_mse, got_psnr, got_ssim = metrics.mse(a, b), metrics.psnr(a, b), metrics.ssim(a, b)
    assert got_mse.shape == got_psnr.shape == got_ssim.shape == (3,)
    for i in range(3):
        x, y = a[i].double().numpy(), b[i].double().numpy()
        assert got_mse[i].item() == pytest.approx(mean_squared_error(x, y), rel=1e-9)
        assert got_psnr[i].item() == pytest.approx(peak_signal_noise_ratio(x, y, data_range=1.0), rel=1e-9)
        expected = structural_similarity(x, y, data_range=1.0, channel_axis=0, win_size=7)
        assert got_ssim[i].item() == pytest.approx(expected, rel=1e-9)


def test_identical_images_have_infinite_psnr_and_unit_ssim():
    a, _ = _pair(2, 3, 8)
    assert torch.isinf(metrics.psnr(a, a)).all()
    assert metrics.ssim(a, a).tolist() == pytest.approx([1.0, 1.0])


def test_ssim_window_fits_small_images():
    assert metrics.ssim_window(8, 8) == 7 and metrics.ssim_window(6, 9) == 5 and metrics.ssim_window(32, 32) == 7
    with pytest.raises(ValueError):
        metrics.ssim_window(2, 8)


def test_label_accuracy():
    assert metrics.label_accuracy(torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 0, 4])) == 0.75
    assert multiset_label_accuracy(torch.tensor([3, 1, 1]), torch.tensor([1, 3, 2])) == pytest.approx(2 / 3)
    assert multiset_label_accuracy(torch.tensor([1, 1]), torch.tensor([1, 2, 1])) == pytest.approx(2 / 3)


def test_hungarian_pairing_recovers_a_permutation():
    truth, _ = _pair(6, 3, 8, seed=1)
    permutation = torch.tensor([4, 0, 5, 2, 1, 3])
    noisy = (truth[permutation] + 0.02 * torch.randn(truth.shape, generator=torch.Generator().manual_seed(2))).clamp(0, 1)
    rec_idx, truth_idx = pair_by_mse(noisy, truth)
    assert truth_idx.tolist() == list(range(6))
    assert permutation[rec_idx].tolist() == truth_idx.tolist()


def test_hungarian_pairing_with_unequal_counts():
    truth, _ = _pair(5, 1, 8, seed=3)
    rec_idx, truth_idx = pair_by_mse(truth[[3, 1]], truth)  # fewer reconstructions than truth
    assert rec_idx.tolist() == [1, 0] and truth_idx.tolist() == [1, 3]
    extra = torch.cat([truth[[2]], torch.zeros(1, 1, 8, 8), truth[[0]]])
    rec_idx, truth_idx = pair_by_mse(extra, truth[[0, 2]])  # more reconstructions than truth
    assert rec_idx.tolist() == [2, 0] and truth_idx.tolist() == [0, 1]


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
    score = score_reconstruction(_reconstruction(recovered, torch.tensor([0])), truth, torch.tensor([0]), identity.denormalize)
    assert score.mse == (0.0,) and score.psnr_mean == PSNR_CAP_DB and score.psnr_exact == 1


def test_truth_outside_image_space_is_refused():
    identity = ChannelStats(mean=(0.0,), std=(1.0,))
    recovered = torch.zeros(1, 1, 8, 8)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        score_reconstruction(_reconstruction(recovered, torch.tensor([0])), recovered - 2.0, torch.tensor([0]), identity.denormalize)


def test_to_row_is_strict_json():
    truth, noisy = _pair(3, 1, 8, seed=5)
    recovered = torch.cat([truth[:1], noisy[1:]])  # one exact pair: PSNR inf
    labels = torch.tensor([0, 1, 2])
    identity = ChannelStats(mean=(0.0,), std=(1.0,))
    reconstruction = Reconstruction(
        images=recovered, labels=labels, objective=float("nan"), restart_objectives=(float("nan"),), iterations=3, seconds=0.1
    )
    score = score_reconstruction(reconstruction, truth, labels, identity.denormalize)
    assert isinstance(score, AttackScore)
    row = json.loads(json.dumps(score.to_row(), allow_nan=False))
    assert row["psnr"][0] is None and row["psnr_exact"] == 1 and row["objective"] is None
    assert row["psnr_mean"] == pytest.approx((PSNR_CAP_DB + sum(score.psnr[1:])) / 3)  # the exact pair counts at the cap
    assert row["lpips"] is None and row["pairing"] == "hungarian-mse"


@pytest.fixture
def offline(monkeypatch):
    """No test downloads: the download fails as it does without a network, and records that it was tried."""
    tried = []

    def no_network(path):
        tried.append(path)
        return "download failed (no network in tests)"

    monkeypatch.setattr(metrics, "download_alexnet", no_network)
    monkeypatch.delenv(metrics.WEIGHTS_ENV, raising=False)
    return tried


def test_lpips_missing_weights_gives_none_and_warns_once(tmp_path, monkeypatch, offline):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    monkeypatch.setattr(metrics, "_lpips_warned", False)
    a, b = _pair(2, 3, 32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = metrics.Lpips(), metrics.Lpips()
        results = [first(a, b), first(a, b), second(a, b)]
    assert results == [None, None, None] and not first.available
    unavailable = [w for w in caught if issubclass(w.category, metrics.LpipsUnavailableWarning)]
    assert len(unavailable) == 1 and str(tmp_path) in str(unavailable[0].message)
    assert "download failed" in str(unavailable[0].message) and len(offline) == 2  # auto tried, once per scorer


def test_lpips_off_never_looks_for_weights(offline):
    lpips = metrics.Lpips("off")
    assert not lpips.available and lpips.unavailable_reason == "adversary.lpips: off" and not offline


def test_lpips_required_refuses_without_the_weights(tmp_path, monkeypatch, offline):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    with pytest.raises(metrics.LpipsRequiredError, match=r"^adversary.lpips = 'required': no ImageNet AlexNet weights"):
        metrics.Lpips("required")


def fake_alexnet(path):
    from torchvision.models import alexnet

    reference = alexnet(weights=None)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(reference.state_dict(), path)
    return reference, hashlib.sha256(path.read_bytes()).hexdigest()[:8]


def test_a_weights_file_that_is_not_torchvisions_alexnet_cannot_pass_as_lpips(tmp_path, monkeypatch, offline):
    fake_alexnet(tmp_path / "alexnet.pth")  # a random AlexNet: right architecture, wrong file
    monkeypatch.setenv(metrics.WEIGHTS_ENV, str(tmp_path / "alexnet.pth"))
    monkeypatch.setattr(metrics, "_lpips_warned", False)
    with pytest.warns(metrics.LpipsUnavailableWarning, match=r"is not torchvision's alexnet-owt-7be5be79.pth: its SHA-256 starts"):
        assert not metrics.Lpips("auto").available
    with pytest.raises(metrics.LpipsRequiredError, match="its SHA-256 starts with"):
        metrics.Lpips("required")
    assert not offline  # a file the user put in place is never replaced by a download


def test_the_weights_file_is_found_through_the_environment_variable(tmp_path, monkeypatch, offline):
    reference, prefix = fake_alexnet(tmp_path / "elsewhere" / "weights.pth")
    monkeypatch.setattr(metrics, "ALEXNET_SHA256_PREFIX", prefix)  # this file stands in for the real one
    monkeypatch.setenv(metrics.WEIGHTS_ENV, str(tmp_path / "elsewhere" / "weights.pth"))
    lpips = metrics.Lpips("required")
    assert torch.equal(getattr(lpips._model.net.slice5, "10").weight, reference.features[10].weight)


@pytest.mark.skipif(
    metrics.weights_problem(metrics.alexnet_checkpoint_path()) is not None, reason="no ImageNet AlexNet weights here"
)
def test_lpips_with_the_real_weights_orders_distortions():
    lpips = metrics.Lpips("required")
    truth, _ = _pair(1, 3, 32, seed=3)
    slight, strong = [(truth + s * torch.randn_like(truth)).clamp(0, 1) for s in (0.02, 0.3)]
    assert 0 < lpips(truth, slight).item() < lpips(truth, strong).item()


def test_lpips_plumbing_with_random_weights():
    lpips = metrics.Lpips(random_weights_for_tests=True)
    assert lpips.available
    for channels, side in [(1, 8), (3, 32)]:
        a, b = _pair(3, channels, side, seed=side)
        distances = lpips(a, b)
        assert distances.shape == (3,) and torch.isfinite(distances).all() and (distances > 0).all()
        assert lpips(a, a).abs().max().item() < 1e-6


def test_lpips_loads_a_cached_alexnet(tmp_path, monkeypatch, offline):
    reference, prefix = fake_alexnet(tmp_path / "checkpoints" / metrics.ALEXNET_CHECKPOINT)
    monkeypatch.setattr(metrics, "ALEXNET_SHA256_PREFIX", prefix)  # this file stands in for the real one
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    lpips = metrics.Lpips()
    assert lpips.available
    assert torch.equal(getattr(lpips._model.net.slice5, "10").weight, reference.features[10].weight)
    a, b = _pair(2, 3, 32)
    assert torch.isfinite(lpips(a, b)).all()


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
    points = [TrajectoryPoint(0, 2.0, torch.rand(2, 1, 8, 8)), TrajectoryPoint(10, 0.5, noisy), TrajectoryPoint(20, 0.0, truth.flip(0))]
    rows = score_trajectory(_reconstruction(truth, torch.tensor([0, 1]), points), truth, identity.denormalize)
    assert [row["iteration"] for row in rows] == [0, 10, 20]
    assert rows[1]["psnr"] > rows[0]["psnr"] and rows[2]["psnr"] == PSNR_CAP_DB and rows[2]["ssim"] == pytest.approx(1.0)
    json.dumps(rows, allow_nan=False)


@pytest.mark.parametrize("count, channels, side, title", [(4, 1, 8, None), (20, 3, 32, "round 3")])
def test_save_grid_writes_a_png_of_the_expected_size(tmp_path, count, channels, side, title):
    originals, recovered = _pair(count, channels, side)
    path = images.save_grid(tmp_path / "grid.png", originals, recovered, title=title)
    assert path.stat().st_size > 0
    height, width = images.grid_shape(count, side, side, title=title is not None)
    with Image.open(path) as png:
        assert png.size == (width, height)
        pixels = np.asarray(png.convert("RGB"))
    scale = images.tile_scale(side, side)
    assert side * scale >= 64
    top = (images.TITLE_BAND if title else 0) + images.PAD
    first = originals[0].repeat(3 // channels, 1, 1).permute(1, 2, 0).numpy()
    shown = pixels[top : top + side * scale : scale, images.PAD : images.PAD + side * scale : scale] / 255.0
    assert np.abs(shown - first).max() < 1 / 255 + 1e-6  # nearest enlargement: each pixel is a block


def test_plot_trajectory_writes_a_png(tmp_path):
    rows = [
        {"iteration": 0, "objective": 1.0, "psnr": 8.0, "ssim": 0.05},
        {"iteration": 5, "objective": 0.1, "psnr": 20.0, "ssim": 0.6},
        {"iteration": 9, "objective": 0.01, "psnr": None, "ssim": 1.0},
    ]
    path = images.plot_trajectory(tmp_path / "trajectory.png", rows)
    assert path.stat().st_size > 0
