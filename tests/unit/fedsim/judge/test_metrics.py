"""Image metrics: MSE, PSNR and SSIM as skimage computes them, and LPIPS' weights."""

import hashlib
import os
import subprocess
import sys
import warnings

import pytest
import torch
from image_pairs import _pair
from skimage.metrics import mean_squared_error, peak_signal_noise_ratio, structural_similarity

from fedsim.judge import metrics


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
    with pytest.warns(
        metrics.LpipsUnavailableWarning, match=r"is not torchvision's alexnet-owt-7be5be79.pth: its SHA-256 starts"
    ):
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


def test_a_sweep_says_lpips_is_unavailable_once_for_all_the_workers_it_starts(tmp_path, monkeypatch, offline):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    monkeypatch.setattr(metrics, "_lpips_warned", False)
    monkeypatch.delenv(metrics.LPIPS_NOTED_ENV, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics.note_unavailable_once("off")  # off never looks, and has nothing to say
        assert not caught and not offline and metrics.LPIPS_NOTED_ENV not in os.environ
        metrics.note_unavailable_once("auto")
        metrics.Lpips()  # the sweep's own later scorer keeps quiet too
    assert [str(w.message).split(":")[0] for w in caught] == ["LPIPS unavailable, reported as None"]
    assert os.environ[metrics.LPIPS_NOTED_ENV] == "1"  # what the workers it spawns inherit


def test_a_process_started_after_the_notice_keeps_it_to_itself():
    probe = "import fedsim.judge.metrics as m; print(m._lpips_warned)"
    environment = {**os.environ, metrics.LPIPS_NOTED_ENV: "1"}
    out = subprocess.run([sys.executable, "-c", probe], env=environment, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
