"""Train a small diffusion prior (a diffusers ``UNet2DModel`` + DDPM schedule) on held-out images.

The prior learns from the data set's TEST split only: clients train on (partitions of) the training split,
so no attacked client holds an image the prior saw. ``fedsim_prior.json`` in the output folder records the
data set, the split, the number of images and a SHA-256 of every image it was trained on, so that the
separation can be checked (tests do). Note: a prior trained on other images of the same data set knows the
data distribution, unlike paper 002's FFHQ prior attacking other data sets: it is a stronger attacker.

The folder is a diffusers checkpoint (``unet/``, ``scheduler/``), loadable by ``prior: {name: diffusers,
path: FOLDER}``; ``training_state.pt`` holds the optimizer and step for ``--resume``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

PRESETS: dict[str, dict[str, Any]] = {
    # 8 px digits on a shared CPU: no attention (a 2x2 mid-block learns nothing from it), one thread (two
    # threads on a busy two-core machine were 4x slower a step than one), ~0.1 s a step
    "cpu": dict(
        channels=(32, 64),
        layers_per_block=1,
        attention=False,
        steps=3000,
        batch_size=64,
        lr=2e-3,
        warmup=100,
        ema=0.995,
        threads=1,
    ),
    # CIFAR-10 sized images on a GPU
    "gpu": dict(
        channels=(64, 128, 256),
        layers_per_block=2,
        attention=True,
        steps=60000,
        batch_size=128,
        lr=2e-4,
        warmup=1000,
        ema=0.9999,
        threads=None,
    ),
}
STATE = "training_state.pt"
RECORD = "fedsim_prior.json"


@dataclass(frozen=True)
class PriorRecord:
    dataset: str
    split: str
    image_size: int
    images: int
    image_sha256: list[str]
    preset: str
    steps: int


def image_hashes(images: np.ndarray) -> list[str]:
    """SHA-256 of each float32 image (N, C, H, W): the identity the split record keeps."""
    return [hashlib.sha256(np.ascontiguousarray(image, dtype=np.float32).tobytes()).hexdigest() for image in images]


def build_unet(image_size: int, channels: int, preset: str) -> Any:
    from diffusers import UNet2DModel

    spec = PRESETS[preset]
    blocks = len(spec["channels"])
    return UNet2DModel(
        sample_size=image_size,
        in_channels=channels,
        out_channels=channels,
        block_out_channels=spec["channels"],
        layers_per_block=spec["layers_per_block"],
        down_block_types=("DownBlock2D",) * blocks,
        up_block_types=("UpBlock2D",) * blocks,
        norm_num_groups=8,
        add_attention=spec["attention"],
    )


def learning_rate(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warm-up to ``peak``, then cosine decay to a tenth of it at ``total``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_prior(
    images: np.ndarray,
    out: Path,
    *,
    dataset: str,
    split: str,
    preset: str = "cpu",
    steps: int | None = None,
    seed: int = 0,
    resume: bool = False,
    progress: bool = True,
    checkpoint_every: int = 500,
    threads: int | None = None,
) -> PriorRecord:
    """Train on ``images`` (N, C, H, W) in [0, 1] and write the diffusers folder ``out``; returns its record.

    The checkpoint in ``out/unet`` holds an exponential moving average of the weights (as DDPM samples
    from): with few steps it denoises markedly better than the last iterate. ``threads`` (default: the
    preset's) bounds torch's intra-op threads while training."""
    if preset not in PRESETS:
        raise ValueError(f"preset = {preset!r}; allowed: {', '.join(PRESETS)}")
    spec = PRESETS[preset]
    threads = threads if threads is not None else spec["threads"]
    if threads is not None and threads < 1:
        raise ValueError(f"threads = {threads}: at least 1")
    if steps is not None and steps < 1:
        raise ValueError(f"steps = {steps}: at least 1 (None: the preset's {spec['steps']})")
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _train(
            images,
            Path(out),
            dataset=dataset,
            split=split,
            preset=preset,
            spec=spec,
            total=int(steps if steps is not None else spec["steps"]),
            seed=seed,
            resume=resume,
            progress=progress,
            checkpoint_every=checkpoint_every,
        )
    finally:
        torch.set_num_threads(previous_threads)


@dataclass
class _Training:
    """What a training run holds between steps: the model, its moving average, the noise schedule, the optimizer,
    the steps taken and the seconds spent in earlier sessions (a resumed training's)."""

    unet: Any
    average: Any
    scheduler: Any
    optimizer: torch.optim.Optimizer
    step: int = 0
    earlier_seconds: float = 0.0


def _start(out: Path, shape: tuple[int, ...], preset: str, spec: dict[str, Any], seed: int, resume: bool) -> _Training:
    """A fresh training of ``preset``'s UNet for images of ``shape``, or the one saved in ``out`` with ``resume``."""
    from diffusers import DDPMScheduler

    if out.exists() and any(out.iterdir()) and not resume and (out / STATE).exists():
        raise FileExistsError(f"{out} holds a prior in training; pass --resume to continue it")
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    _, c, h, _ = shape
    unet = build_unet(h, c, preset)
    average = copy.deepcopy(unet).requires_grad_(False)
    scheduler = DDPMScheduler(num_train_timesteps=1000, beta_schedule="linear")
    optimizer = torch.optim.AdamW(unet.parameters(), lr=spec["lr"])
    training = _Training(unet, average, scheduler, optimizer)
    if resume and (out / STATE).exists():
        # imported here: the models package pulls in torchvision, which attack workers (importing the priors)
        # must not load before they leave the server's working directory
        from fedsim.models.checkpoint import load_weights_only

        state = load_weights_only(out / STATE, str(out / STATE))  # tensors, state dicts, numbers: no code runs
        unet.load_state_dict(state["unet"])
        average.load_state_dict(state.get("ema", state["unet"]))
        optimizer.load_state_dict(state["optimizer"])
        training.step = int(state["step"])
        training.earlier_seconds = float(state.get("seconds", 0.0))
        torch.set_rng_state(state["rng"])
    return training


def _save(training: _Training, out: Path, record: PriorRecord, seconds: float) -> None:
    """The state to resume from, the diffusers folder (the moving average) and the split record, with the steps and
    ``seconds`` trained so far."""
    torch.save(
        {
            "unet": training.unet.state_dict(),
            "ema": training.average.state_dict(),
            "optimizer": training.optimizer.state_dict(),
            "step": training.step,
            "rng": torch.get_rng_state(),
            "seconds": seconds,
        },
        out / STATE,
    )
    training.average.save_pretrained(out / "unet")
    training.scheduler.save_pretrained(out / "scheduler")
    trained = {
        "trained_steps": training.step,
        "training_seconds": round(seconds, 1),
        "threads": torch.get_num_threads(),
    }
    (out / RECORD).write_text(json.dumps({**asdict(record), **trained}, indent=1))


def _denoising_step(
    training: _Training, data: torch.Tensor, alphas: torch.Tensor, spec: dict[str, Any], total: int
) -> torch.Tensor:
    """One optimizer step on a random batch noised at random timesteps, then the moving average; returns the loss."""
    unet, optimizer, step = training.unet, training.optimizer, training.step
    for group in optimizer.param_groups:
        group["lr"] = learning_rate(step, total, spec["lr"], spec["warmup"])
    batch = data[torch.randint(0, data.shape[0], (spec["batch_size"],))]
    t = torch.randint(0, 1000, (batch.shape[0],))
    noise = torch.randn_like(batch)
    a = alphas[t].reshape(-1, 1, 1, 1)
    noisy = a.sqrt() * batch + (1 - a).sqrt() * noise
    loss = torch.nn.functional.mse_loss(unet(noisy, t).sample, noise)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    # early on the average follows the weights closely (the warm-up of Adam's moments)
    decay = min(spec["ema"], (1 + step) / (10 + step))
    with torch.no_grad():
        for kept, current in zip(training.average.parameters(), unet.parameters(), strict=True):
            kept.lerp_(current, 1 - decay)
    training.step = step + 1
    return loss


def _train(
    images: np.ndarray,
    out: Path,
    *,
    dataset: str,
    split: str,
    preset: str,
    spec: dict[str, Any],
    total: int,
    seed: int,
    resume: bool,
    progress: bool,
    checkpoint_every: int,
) -> PriorRecord:
    from rich.progress import Progress

    training = _start(out, images.shape, preset, spec, seed, resume)
    data = torch.from_numpy(np.asarray(images, dtype=np.float32)) * 2 - 1  # diffusers' [-1, 1]
    alphas = training.scheduler.alphas_cumprod.float()
    n, _, h, _ = images.shape
    record = PriorRecord(dataset, split, h, n, image_hashes(images), preset, total)
    start = time.perf_counter()
    training.unet.train()
    with Progress(disable=not progress) as bar:
        task = bar.add_task("training prior", total=total, completed=training.step)
        while training.step < total:
            loss = _denoising_step(training, data, alphas, spec, total)
            bar.update(task, advance=1, description=f"training prior (loss {loss.item():.3f})")
            if training.step % checkpoint_every == 0 or training.step == total:
                _save(training, out, record, training.earlier_seconds + time.perf_counter() - start)
    return record


def read_record(folder: Path) -> dict[str, Any]:
    """The split record of a prior folder (``fedsim_prior.json``)."""
    return json.loads((Path(folder) / RECORD).read_text())
