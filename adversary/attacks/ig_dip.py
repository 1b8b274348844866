"""Inverting Gradients through a deep image prior (paper 001's attack, after Ulyanov, Vedaldi & Lempitsky 2018).

Instead of the pixels, the attack optimises the weights of an untrained convolutional generator that maps a
fixed random input to the dummy images: ``x = G_w(z)``. The structure of a convolutional network makes
natural images easier to reach than noise (the deep image prior), so it acts as an image prior without any
training data. The objective is Inverting Gradients' (cosine matching + TV, labels recovered first); its
gradient with respect to ``w`` is the problem's ``df/dx`` pulled back through the generator by autograd.

The generator is a small encoder-decoder with skip connections (``generator_levels`` stride-2
down-samplings of ``generator_width`` channels, GroupNorm, LeakyReLU; paper 001 uses a larger PixelCNN++-style
U-Net with attention). Its sigmoid output is mapped onto the view's ``input_bounds`` (so the images stay
in range without a box projection). Each (target, restart) row has its own generator, drawn from its own
seed, and its own input ``z`` (``init``: uniform or randn, times ``init_scale``; DIP's default is U(0, 0.1)
noise); all rows' generators run as one ``vmap`` over their stacked weights (``torch.func.functional_call``),
and the optimizers see the flattened weights as the rows of V, exactly as they see pixels elsewhere.

Paper 001 adds a feature-matching term (the first layer's input features reconstructed in closed form);
it is not implemented here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, model_validator
from torch import nn
from torch.func import functional_call, vmap

from adversary.inversion import clock
from adversary.inversion.optimizers import Budget
from adversary.inversion.options import OptimizationOptions
from adversary.inversion.problem import BatchedProblem, group_views, init_seed
from adversary.inversion.solver import DTYPES, _deterministic, best_restarts, optimize, trajectory_monitor
from adversary.inversion.spec import AttackSpec
from adversary.registry import ATTACKS
from adversary.view import AttackerView, Reconstruction, TrajectoryPoint

DEFAULTS: dict[str, Any] = dict(
    iterations=1000,
    init="uniform",
    init_scale=0.1,
    loss="cosine",
    optimizer="adam",
    lr=0.01,
    regularizers=[{"name": "tv", "weight": 1e-4}],
)


class IgDipOptions(OptimizationOptions):
    name: Literal["ig-dip"] = Field(
        "ig-dip",
        description="Inverting Gradients through a deep image prior (Data Reconstruction Attacks and Defenses)",
    )
    field_defaults: ClassVar[dict[str, Any]] = DEFAULTS
    generator_width: int = Field(32, ge=1, description="channels of the deep-image-prior generator at every level")
    generator_levels: int = Field(2, ge=0, description="stride-2 down-samplings (and up-samplings) of the generator")
    noise_channels: int = Field(16, ge=1, description="channels of the generator's fixed random input z")

    @model_validator(mode="after")
    def _generator_input(self) -> IgDipOptions:
        if self.init == "zeros":
            raise ValueError("init = 'zeros': ig-dip draws the generator's input z from init; allowed: uniform, randn")
        return self


SPEC = AttackSpec(name="ig-dip", signed=False, box=False, lr_decay=True)


class DipGenerator(nn.Module):
    """z (N, noise_channels, H, W) -> images (N, channels, H, W) in (0, 1): an encoder-decoder with skips."""

    def __init__(self, channels: int, noise_channels: int, width: int, levels: int):
        super().__init__()
        groups = math.gcd(width, 8)
        self.stem = nn.Sequential(
            nn.Conv2d(noise_channels, width, 3, padding=1), nn.GroupNorm(groups, width), nn.LeakyReLU(0.2)
        )
        self.down = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(width, width, 3, stride=2, padding=1), nn.GroupNorm(groups, width), nn.LeakyReLU(0.2)
            )
            for _ in range(levels)
        )
        self.up = nn.ModuleList(
            nn.Sequential(nn.Conv2d(2 * width, width, 3, padding=1), nn.GroupNorm(groups, width), nn.LeakyReLU(0.2))
            for _ in range(levels)
        )
        self.head = nn.Conv2d(width, channels, 1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.stem(z)
        skips = []
        for block in self.down:
            skips.append(h)
            h = block(h)
        for block, skip in zip(self.up, reversed(skips), strict=True):
            h = nn.functional.interpolate(h, size=skip.shape[-2:], mode="bilinear", align_corners=False)
            h = block(torch.cat([h, skip], dim=1))
        return torch.sigmoid(self.head(h))


class DipParametrization:
    """Rows of generator weights W (P, Dw) -> dummy images (P, N*C*H*W) in the model's input space."""

    def __init__(self, options: IgDipOptions, x_shape: tuple[int, ...], bounds, seeds: Sequence[int], device, dtype):
        n, c, h, w = x_shape
        smallest = min(h, w)
        if 2**options.generator_levels > smallest:
            raise ValueError(
                f"generator_levels = {options.generator_levels}: {smallest} px images allow at most "
                f"{int(math.log2(smallest))} stride-2 levels"
            )
        self.module = DipGenerator(c, options.noise_channels, options.generator_width, options.generator_levels)
        self.module = self.module.to(device=device, dtype=dtype)
        self.names = [name for name, _ in self.module.named_parameters()]
        self.shapes = [p.shape for _, p in self.module.named_parameters()]
        rows, inputs = [], []
        for row_seed in seeds:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(row_seed)
                generator = DipGenerator(c, options.noise_channels, options.generator_width, options.generator_levels)
            rows.append(torch.cat([p.detach().reshape(-1).double() for p in generator.parameters()]))
            noise = torch.Generator().manual_seed(row_seed)
            shape = (n, options.noise_channels, h, w)
            if options.init == "uniform":
                z = torch.rand(shape, generator=noise, dtype=torch.float64) * float(options.init_scale)
            else:
                z = torch.randn(shape, generator=noise, dtype=torch.float64) * float(options.init_scale)
            inputs.append(z)
        self.w0 = torch.stack(rows).to(device=device, dtype=dtype)
        self.z = torch.stack(inputs).to(device=device, dtype=dtype)
        if bounds is None:
            self.low, self.span = (
                torch.zeros((), device=device, dtype=dtype),
                torch.ones((), device=device, dtype=dtype),
            )
        else:
            low, high = (b.detach().to(device=device, dtype=dtype).reshape(-1, 1, 1) for b in bounds)
            self.low, self.span = low, high - low

    def _unflatten(self, w: torch.Tensor) -> dict[str, torch.Tensor]:
        parts = torch.split(w, [math.prod(shape) for shape in self.shapes], dim=1)
        return {
            name: part.reshape(w.shape[0], *shape)
            for name, part, shape in zip(self.names, parts, self.shapes, strict=True)
        }

    def images(self, w: torch.Tensor) -> torch.Tensor:
        """(P, N, C, H, W) images of the rows ``w``; differentiable in ``w``."""
        unit = vmap(lambda params, z: functional_call(self.module, params, (z,)))(self._unflatten(w), self.z)
        return self.low + self.span * unit


def attack(
    views: Sequence[AttackerView], options: IgDipOptions, seed: int, device: torch.device
) -> list[Reconstruction]:
    """Reconstruct every view; compatible views and all restarts are one batched problem over generator weights."""
    device = torch.device(device)
    dtype = DTYPES[options.precision]
    deadline = clock.deadline_after(options.time_limit)
    restart_ids = options.restart_ids()
    results: dict[int, Reconstruction] = {}
    with _deterministic(options.deterministic):
        for group in group_views(views):
            start = time.perf_counter()
            group_views_ = [views[i] for i in group]
            problem = BatchedProblem.build(SPEC, options, group_views_, restart_ids, device, dtype)
            seeds = [init_seed(seed, t, r) for t in group for r in restart_ids]
            dip = DipParametrization(options, problem.x_shape, group_views_[0].input_bounds, seeds, device, dtype)
            rows = len(seeds)

            # the closures below read this iteration's problem: they run before the loop moves on
            def evaluate(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                w = w.detach().requires_grad_(True)
                with torch.enable_grad():
                    x = dip.images(w)  # noqa: B023
                    f, g = problem.evaluate(x.detach().reshape(rows, -1))  # noqa: B023
                    (grad,) = torch.autograd.grad(x, w, grad_outputs=g.reshape(x.shape))
                return f, grad

            trajectories: list[list[TrajectoryPoint]] = [[] for _ in group]
            shape = (problem.num_targets, problem.restarts, *problem.x_shape)
            monitor = (
                trajectory_monitor(lambda w: dip.images(w).reshape(shape), options.log_every, trajectories)  # noqa: B023
                if options.log_every
                else None
            )
            budget = Budget(deadline)
            w, f = optimize(evaluate, dip.w0, options, SPEC, None, monitor, budget)
            with torch.no_grad():
                images = dip.images(w)
            labels = problem.labels_of(images.reshape(rows, -1))
            recs = best_restarts(
                f, images.reshape(shape), labels, budget, seconds=time.perf_counter() - start, trajectories=trajectories
            )
            results.update(zip(group, recs, strict=True))
    return [results[i] for i in range(len(views))]


ATTACKS.register(
    "ig-dip",
    help="Inverting Gradients through a deep image prior (Data Reconstruction Attacks and Defenses: A Systematic "
    "Evaluation; Ulyanov et al. 2018): the weights of an untrained "
    "conv generator are optimised instead of the pixels",
    config=IgDipOptions,
)(attack)
