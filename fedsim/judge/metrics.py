"""Per-image leakage metrics on [0, 1] images, computed outside the attack.

Every function takes ``(N, C, H, W)`` float tensors already in image space (``ChannelStats.denormalize``
undoes the model's normalisation first) and returns one value per image, so a caller can pair, filter
and average as it chooses. Means over images follow breaching: the mean PSNR of a batch is the mean of
per-image PSNRs, not the PSNR of the pooled error.

LPIPS needs an ImageNet-trained AlexNet: torchvision's ``alexnet-owt-7be5be79.pth``. ``Lpips`` finds it
at ``$FEDSIM_LPIPS_WEIGHTS`` (a file the user put in place, e.g. on an air-gapped cluster) or in the torch
hub cache, and checks that it is that file: torchvision names its weight files after the first digits of
their SHA-256, so a wrong backbone cannot pass as LPIPS. ``adversary.lpips`` says what happens without it:
``auto`` downloads it where a network is available, else reports LPIPS as ``None`` with one warning;
``required`` refuses to start; ``off`` never computes it. A score from a randomly initialised trunk would
look like a perceptual distance and mean nothing, so it is never produced unless a test asks for it.
"""

from __future__ import annotations

import hashlib
import math
import os
import socket
import warnings
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F

DATA_RANGE = 1.0  # images are scored in [0, 1]
ALEXNET_CHECKPOINT = "alexnet-owt-7be5be79.pth"  # torchvision's AlexNet_Weights.IMAGENET1K_V1 file name
ALEXNET_SHA256_PREFIX = "7be5be79"  # torchvision's convention: the file name ends in its hash's first digits
ALEXNET_URL = f"https://download.pytorch.org/models/{ALEXNET_CHECKPOINT}"
WEIGHTS_ENV = "FEDSIM_LPIPS_WEIGHTS"
DOWNLOAD_TIMEOUT_S = 30.0


class LpipsRequiredError(RuntimeError):
    """``adversary.lpips: required`` and the AlexNet weights are missing, unreadable or not the right file."""


LPIPS_MIN_SIDE = 32  # AlexNet's conv/pool stack needs >= 31 px; smaller images are upsampled to 32

# AlexNet ``features`` index -> LPIPS slice holding it (lpips.pretrained_networks.alexnet splits
# features[0:2], [2:5], [5:8], [8:10], [10:12] into slice1..slice5 and keeps the module indices).
_ALEX_SLICE_BOUNDS = ((0, 2), (2, 5), (5, 8), (8, 10), (10, 12))

#: set by a process that has said LPIPS is unavailable, so that the processes it starts (a sweep's
#: workers) do not say it again: one line per command
LPIPS_NOTED_ENV = "FEDSIM_LPIPS_NOTED"
_lpips_warned = os.environ.get(LPIPS_NOTED_ENV) == "1"  # one warning per command, however often it is asked


class LpipsUnavailableWarning(UserWarning):
    """LPIPS cannot be computed here (no cached AlexNet weights); its metric is reported as None."""


def _check_pair(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.ndim != 4 or a.shape != b.shape:
        raise ValueError(
            f"metrics need two (N, C, H, W) tensors of one shape, got {tuple(a.shape)} and {tuple(b.shape)}"
        )


def mse(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Mean squared error per image, (N,) float64.

    Float64 so that near-perfect reconstructions keep their PSNR instead of losing it to float32 rounding.
    """
    _check_pair(a, b)
    diff = a.detach().cpu().double() - b.detach().cpu().double()
    return diff.pow(2).flatten(1).mean(dim=1)


def psnr(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Peak signal-to-noise ratio per image in dB for data range 1, (N,) float64.

    An exact reconstruction (MSE 0) has PSNR ``+inf``. It is kept, not capped: a cap would invent a
    number; averaging code decides (``fedsim.judge.scoring`` averages the finite values and counts the exact ones).
    """
    return 10.0 * torch.log10(DATA_RANGE**2 / mse(a, b))  # torch: x / 0 -> inf, no warning


def ssim_window(height: int, width: int) -> int:
    """skimage's default 7x7 window, shrunk to the largest odd size that fits small images (8x8 digits: 7)."""
    side = min(7, height, width)
    side = side if side % 2 == 1 else side - 1
    if side < 3:
        raise ValueError(f"SSIM needs images of at least 3x3 pixels, got {height}x{width}")
    return side


def ssim(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Structural similarity per image, (N,) float64: scikit-image's ``structural_similarity`` (uniform window,
    sample covariance, K1 0.01, K2 0.03, data range 1, the mean over channels), computed for all images at once.

    The null of every verdict scores thousands of guesses per target; skimage's per-image call would spend its time
    on per-call overhead. The window's valid positions are exactly skimage's after it crops the filtered border,
    and the tests check agreement with skimage itself.
    """
    _check_pair(a, b)
    window = ssim_window(a.shape[2], a.shape[3])
    x = a.detach().cpu().double()
    y = b.detach().cpu().double()
    count, channels = x.shape[:2]
    x, y = x.reshape(count * channels, 1, *x.shape[2:]), y.reshape(count * channels, 1, *y.shape[2:])

    def local_mean(z: torch.Tensor) -> torch.Tensor:  # the mean over every window inside the image
        # stride 1, no padding: exactly the positions skimage keeps; 1.2-2x faster than an integral image here
        return F.avg_pool2d(z, window, stride=1)

    covariance_norm = window**2 / (window**2 - 1)  # skimage's sample covariance
    mean_x, mean_y = local_mean(x), local_mean(y)
    var_x = covariance_norm * (local_mean(x * x) - mean_x * mean_x)
    var_y = covariance_norm * (local_mean(y * y) - mean_y * mean_y)
    cov_xy = covariance_norm * (local_mean(x * y) - mean_x * mean_y)
    c1, c2 = (0.01 * DATA_RANGE) ** 2, (0.03 * DATA_RANGE) ** 2
    numerator = (2 * mean_x * mean_y + c1) * (2 * cov_xy + c2)
    denominator = (mean_x * mean_x + mean_y * mean_y + c1) * (var_x + var_y + c2)
    per_channel = (numerator / denominator).flatten(1).mean(dim=1)
    return per_channel.reshape(count, channels).mean(dim=1)


def label_accuracy(pred: torch.Tensor, true: torch.Tensor) -> float:
    """Fraction of positions where the labels agree (the caller has already paired them)."""
    pred, true = pred.detach().cpu().reshape(-1), true.detach().cpu().reshape(-1)
    if pred.shape != true.shape or pred.numel() == 0:
        raise ValueError(
            f"label_accuracy needs two equally long, non-empty label vectors, got {pred.numel()} and {true.numel()}"
        )
    return float((pred.long() == true.long()).double().mean())


def alexnet_checkpoint_path() -> Path:
    """Where fedsim looks for ImageNet AlexNet weights: ``$FEDSIM_LPIPS_WEIGHTS``, else torchvision's cache."""
    if os.environ.get(WEIGHTS_ENV):
        return Path(os.environ[WEIGHTS_ENV]).expanduser()
    return Path(torch.hub.get_dir()) / "checkpoints" / ALEXNET_CHECKPOINT


def weights_problem(path: Path) -> str | None:
    """Why ``path`` is not torchvision's ImageNet AlexNet file (missing, or another file), or None."""
    if not path.is_file():
        return (
            f"no ImageNet AlexNet weights at {path} "
            f"(put torchvision's {ALEXNET_CHECKPOINT} there, or set {WEIGHTS_ENV})"
        )
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if not digest.hexdigest().startswith(ALEXNET_SHA256_PREFIX):
        return (
            f"{path} is not torchvision's {ALEXNET_CHECKPOINT}: its SHA-256 starts with {digest.hexdigest()[:8]}, "
            f"not {ALEXNET_SHA256_PREFIX}"
        )
    return None


def download_alexnet(path: Path) -> str | None:
    """Fetch the weights into ``path`` (torch hub's downloader checks the hash prefix); why it failed, or None."""
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)  # a network that swallows packets must not hang a run
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.hub.download_url_to_file(ALEXNET_URL, str(path), hash_prefix=ALEXNET_SHA256_PREFIX, progress=False)
    except Exception as error:  # offline, DNS, proxy, disk: all mean "not available here"
        return f"download of {ALEXNET_URL} failed ({type(error).__name__}: {error})"
    finally:
        socket.setdefaulttimeout(previous)
    return None


def find_weights(checkpoint: Path) -> str | None:
    """Why the AlexNet weights at ``checkpoint`` cannot be used, after one download try where they are missing
    (and no weights file was named by the user); None when they can."""
    problem = weights_problem(checkpoint)
    if problem is not None and not checkpoint.exists() and WEIGHTS_ENV not in os.environ:
        failed = download_alexnet(checkpoint)
        problem = f"{problem}; {failed}" if failed else weights_problem(checkpoint)
    return problem


def note_unavailable_once(mode: str) -> None:
    """For a process about to start others that score with ``adversary.lpips: mode``: say here, once, that
    LPIPS is unavailable (``auto`` without usable weights), and let the processes started from now on keep it
    to themselves (``LPIPS_NOTED_ENV``). Never builds the model."""
    if mode != "auto" or _lpips_warned:
        return
    problem = find_weights(alexnet_checkpoint_path())
    if problem is not None:
        _warn_unavailable(problem, stacklevel=2)
        os.environ[LPIPS_NOTED_ENV] = "1"


def _warn_unavailable(reason: str, stacklevel: int = 3) -> None:
    global _lpips_warned
    if _lpips_warned:
        return
    _lpips_warned = True
    message = f"LPIPS unavailable, reported as None: {reason}"
    warnings.warn(message, LpipsUnavailableWarning, stacklevel=stacklevel)


def _alexnet_slices_state(alexnet_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """torchvision's ``features.<i>.<p>`` keys renamed to lpips' ``slice<k>.<i>.<p>``; classifier dropped."""
    renamed: dict[str, torch.Tensor] = {}
    for key, value in alexnet_state.items():
        parts = key.split(".")
        if parts[0] != "features":
            continue
        index = int(parts[1])
        slice_number = next(k for k, (lo, hi) in enumerate(_ALEX_SLICE_BOUNDS, start=1) if lo <= index < hi)
        renamed[f"slice{slice_number}.{index}.{'.'.join(parts[2:])}"] = value
    return renamed


def _build_lpips_model() -> torch.nn.Module:
    """lpips' AlexNet LPIPS with calibrated linear heads (shipped in the wheel) and a random trunk.

    ``pnet_rand=True`` makes lpips call ``torchvision.models.alexnet(pretrained=False)``, which builds
    the architecture without touching the network; the deprecation warning that call raises is muted.
    """
    import lpips  # deferred: importing it is slow and scoring without LPIPS should not pay for it

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = lpips.LPIPS(net="alex", pretrained=True, pnet_rand=True, verbose=False)
    return model.eval()


class Lpips:
    """LPIPS (AlexNet, v0.1) per image, or ``None`` when the ImageNet backbone is not cached.

    Inputs are [0, 1] images; they are mapped to [-1, 1] (what LPIPS was calibrated on), grayscale is
    repeated to three channels, and images whose smaller side is under ``LPIPS_MIN_SIDE`` are upsampled
    bilinearly so that side becomes 32 px: AlexNet's stride-4 conv and two stride-2 pools leave no
    spatial extent below 31 px. Upsampling 8x8 digits this way is a convention, so LPIPS on tiny images
    compares interpolated images and is less meaningful than on CIFAR-sized ones.

    ``random_weights_for_tests=True`` keeps the random trunk so tests can exercise the plumbing; its
    numbers are not LPIPS and must never be reported.
    """

    def __init__(self, mode: str = "auto", *, random_weights_for_tests: bool = False) -> None:
        if mode not in ("auto", "off", "required"):
            raise ValueError(f"adversary.lpips = {mode!r}: allowed: auto, off, required")
        self.random_weights = random_weights_for_tests
        self._model: torch.nn.Module | None = None
        self.unavailable_reason: str | None = None
        if random_weights_for_tests:
            self._model = _build_lpips_model()
            return
        if mode == "off":
            self.unavailable_reason = "adversary.lpips: off"
            return
        checkpoint = alexnet_checkpoint_path()
        problem = find_weights(checkpoint)
        if problem is None:
            try:
                state = torch.load(checkpoint, map_location="cpu", weights_only=True)
                model = _build_lpips_model()
                cast(torch.nn.Module, model.net).load_state_dict(_alexnet_slices_state(state), strict=True)
                self._model = model
                return
            except Exception as error:  # a file with the right hash that still does not load: never random weights
                problem = f"cannot load AlexNet weights from {checkpoint}: {error}"
        if mode == "required":
            raise LpipsRequiredError(f"adversary.lpips = 'required': {problem}")
        self.unavailable_reason = problem
        _warn_unavailable(problem)

    @property
    def available(self) -> bool:
        return self._model is not None

    def __call__(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor | None:
        """LPIPS distance per image, (N,) float64 (0 for identical images), or None when unavailable."""
        _check_pair(a, b)
        if self._model is None:
            return None
        with torch.no_grad():
            distances = self._model(_lpips_input(a), _lpips_input(b))
        return distances.reshape(-1).double()


def _lpips_input(x: torch.Tensor) -> torch.Tensor:
    """[0, 1] (N, C, H, W) -> [-1, 1] three-channel float32 CPU images of at least 32 px on the short side."""
    x = x.detach().cpu().float()
    if x.shape[1] == 1:
        x = x.repeat(1, 3, 1, 1)
    elif x.shape[1] != 3:
        raise ValueError(f"LPIPS needs 1- or 3-channel images, got {x.shape[1]} channels")
    height, width = x.shape[2], x.shape[3]
    short = min(height, width)
    if short < LPIPS_MIN_SIDE:
        scale = LPIPS_MIN_SIDE / short
        size = (max(LPIPS_MIN_SIDE, math.ceil(height * scale)), max(LPIPS_MIN_SIDE, math.ceil(width * scale)))
        x = F.interpolate(x, size=size, mode="bilinear", align_corners=False)
    return x * 2.0 - 1.0
