"""GGSS-R: gradient-guided spherical sampling of a diffusion prior (paper 002: gradient inversion with a
DDIM prior guided by the leaked gradient; the spherical step is that of DSG, Yang et al. 2024).

Each DDIM step (paper 002, eqs. 10-17):

* the denoised estimate (eq. 10/11, Tweedie): ``x0 = (x_t - sqrt(1 - abar_t) eps(x_t, t)) / sqrt(abar_t)``;
* the attack loss of that estimate (eq. 12): the gradient-matching distance between the update the estimate
  produces in the attacked model and the observed one, computed by the same problem code as the other
  attacks (same views, same simulated local training, same recovered labels), and its gradient ``g`` with
  respect to ``x_t``, differentiating through the denoiser (chain rule: the problem's ``dL/dx0`` pulled back
  through the prior by autograd);
* the unconditional DDIM step (eq. 14/15) ``mu = sqrt(abar_prev) x0 + sqrt(1 - abar_prev - s^2) eps`` with
  ``s = sigma_t`` (eta = 1), whose samples lie near the sphere of radius ``r = sqrt(n) sigma_t`` around ``mu``
  (n = the number of pixels);
* the guided step on that sphere (eqs. 16-17): ``d* = -r g / |g|``, ``d_m = s z + gamma (d* - s z)``,
  ``x_prev = mu + r d_m / |d_m|``, with guidance rate ``gamma`` (paper 002, Table 6: 0.2).

The last step returns the denoised estimate. Restarts (independent noise) and targets are batched rows of
one problem; each target keeps the restart whose final estimate has the lowest attack loss. The prior works
in [-1, 1]; images map affinely onto the view's ``input_bounds`` (identity without bounds).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

import torch
from pydantic import Field

from adversary.inversion.options import AttackOptions, OptimizationOptions
from adversary.inversion.problem import BatchedProblem, group_views, init_seed
from adversary.inversion.requirements import AttackSetting
from adversary.inversion.solver import best_restarts
from adversary.inversion.spec import AttackSpec
from adversary.priors import PRIORS, Prior, PriorConfig
from adversary.registry import ATTACKS
from adversary.view import AttackerView, Reconstruction

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _prior_union() -> Any:
    variants = tuple(PRIORS.configs().values())
    union = Union.__getitem__(variants)  # Union[...] over a tuple built at run time: `|` cannot spell it
    return Annotated[union, Field(discriminator="name")] if len(variants) > 1 else variants[0]


if TYPE_CHECKING:  # the type checker reads the base class, pydantic the union of every registered prior
    PriorChoice = PriorConfig
else:
    PriorChoice = _prior_union()


class GgssrOptions(AttackOptions):
    name: Literal["ggssr"] = Field("ggssr", description="GGSS-R: DDIM sampling guided by the gradient")
    requires: ClassVar[str] = "prior: a generative prior of the model's image shape ({name: diffusers, path: ...})"
    prior: PriorChoice | None = Field(
        None,
        description="the generative prior (required): {name: diffusers, path: FOLDER_OR_HUB_ID} (e.g. a `fedsim prior "
        "train` folder), or {name: gaussian} (a baseline that knows nothing about images)",
    )
    steps: int = Field(50, ge=2, description="DDIM sampling steps")
    guidance_rate: float = Field(
        0.2, ge=0, le=1, description="gamma of the spherical guided step (the GGSS-R paper's Table 6)"
    )
    restarts: int = Field(1, ge=1, description="independent samples, batched; the lowest final attack loss wins")
    loss: Literal["l2", "cosine", "l1"] = Field(
        "l2", description="gradient-matching distance (the GGSS-R paper's: Euclidean)"
    )
    precision: Literal["float32", "float64"] = Field("float32", description="arithmetic of the attack")
    deterministic: bool = Field(False, description="unused by sampling; kept for a uniform attack interface")

    def refusal(self, setting: AttackSetting) -> str | None:
        reason = super().refusal(setting)
        if reason is None and self.prior is None:
            reason = (
                "ggssr samples from a generative prior and none is given: set prior: {name: diffusers, path: "
                "FOLDER} (`fedsim prior train` makes one) or {name: gaussian}"
            )
        if reason is None:
            shape = self.prior.image_shape()
            if shape is not None and tuple(shape) != tuple(setting.input_shape):
                reason = (
                    f"prior {self.prior.name} makes images of shape {tuple(shape)}, the model takes "
                    f"{tuple(setting.input_shape)}"
                )
        return reason


SPEC = AttackSpec(name="ggssr")


def ddim_timesteps(train_steps: int, steps: int) -> list[int]:
    """Descending training timesteps visited by ``steps`` DDIM steps (the first is the noisiest)."""
    return sorted({round(t) for t in torch.linspace(train_steps - 1, 0, steps).tolist()}, reverse=True)


def sphere_step(mean: torch.Tensor, grad: torch.Tensor, noise: torch.Tensor, sigma: float, rate: float) -> torch.Tensor:
    """Eqs. 16-17 for rows (P, D): a point on the sphere of radius sqrt(D) sigma around ``mean``, between the
    unconditional sample direction ``noise`` and the steepest descent of the loss, weighted by ``rate``."""
    radius = math.sqrt(mean.shape[1]) * sigma
    descent = -radius * grad / grad.norm(dim=1, keepdim=True).clamp_min(1e-30)
    sample = sigma * noise
    mixed = sample + rate * (descent - sample)
    return mean + radius * mixed / mixed.norm(dim=1, keepdim=True).clamp_min(1e-30)


def guided_sample(
    prior: Prior,
    loss_and_grad: Any,
    x_T: torch.Tensor,
    steps: int,
    rate: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """GGSS-R sampling of rows ``x_T`` (P, C, H, W...) in prior space; ``loss_and_grad(x0)`` -> (f (P,), df/dx0).

    ``rate = 0`` is the prior's unguided DDIM sampling (eta = 1) from the same noise."""
    abar = prior.alphas_cumprod
    times = ddim_timesteps(abar.shape[0], steps)
    x = x_T
    rows = x.shape[0]
    x0 = x
    for i, t in enumerate(times):
        a_t = abar[t]
        a_prev = abar[times[i + 1]] if i + 1 < len(times) else torch.ones_like(a_t)
        with torch.enable_grad():
            x_in = x.detach().requires_grad_(rate > 0)
            eps = _predict(prior, x_in, t)
            x0 = (x_in - (1 - a_t).sqrt() * eps) / a_t.sqrt()
            if rate > 0 and i + 1 < len(times):
                _, grad_x0 = loss_and_grad(x0.detach())
                (grad,) = torch.autograd.grad(x0, x_in, grad_outputs=grad_x0.reshape(x0.shape))
            else:
                grad = None
        x0, eps = x0.detach(), eps.detach()
        if i + 1 == len(times):
            break
        sigma = float(((1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev)).clamp_min(0).sqrt())
        mean = a_prev.sqrt() * x0 + (1 - a_prev - sigma**2).clamp_min(0).sqrt() * eps
        noise = torch.randn(x.shape, generator=generator, dtype=torch.float64).to(x)
        flat_mean, flat_noise = mean.reshape(rows, -1), noise.reshape(rows, -1)
        if grad is None:
            x = (flat_mean + sigma * flat_noise).reshape(x.shape)
        else:
            x = sphere_step(flat_mean, grad.reshape(rows, -1), flat_noise, sigma, rate).reshape(x.shape)
    return x0


def _predict(prior: Prior, x: torch.Tensor, t: int) -> torch.Tensor:
    """eps for rows (P, N, C, H, W) or (P, C, H, W): the prior sees a batch of single images."""
    flat = x.reshape(-1, *x.shape[-3:])
    return prior.predict_noise(flat, t).reshape(x.shape)


def _to_model_space(view: AttackerView, device: torch.device, dtype: torch.dtype):
    if view.input_bounds is None:
        return (lambda p: p), (lambda g: g)
    low, high = (b.detach().to(device=device, dtype=dtype).reshape(-1, 1, 1) for b in view.input_bounds)
    half = (high - low) / 2
    return (lambda p: low + (p + 1) * half), (lambda g: g * half)


def attack(
    views: Sequence[AttackerView], options: GgssrOptions, seed: int, device: torch.device
) -> list[Reconstruction]:
    """Reconstruct every view by guided sampling; compatible views and all restarts are one batched problem."""
    device = torch.device(device)
    dtype = DTYPES[options.precision]
    if options.prior is None:
        raise ValueError("ggssr: prior is required (e.g. {name: diffusers, path: FOLDER} or {name: gaussian})")
    matching = OptimizationOptions.model_construct(
        name="ggssr", loss=options.loss, regularizers=[], init="zeros", init_scale=1.0, restarts=options.restarts
    )
    results: dict[int, Reconstruction] = {}
    restart_ids = list(range(options.restarts))
    for group in group_views(views):
        start = time.perf_counter()
        group_views_ = [views[i] for i in group]
        problem = BatchedProblem.build(SPEC, matching, group_views_, restart_ids, device, dtype)
        prior = options.prior.load(tuple(group_views_[0].input_shape), device, dtype)
        to_model, grad_to_prior = _to_model_space(group_views_[0], device, dtype)
        rows = problem.num_targets * problem.restarts

        # the closures below read this iteration's problem: they run before the loop moves on
        def loss_and_grad(x0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            f, g = problem.evaluate(to_model(x0).reshape(rows, -1))  # noqa: B023
            return f, grad_to_prior(g.reshape(x0.shape))  # noqa: B023

        noise = [
            torch.randn(
                (problem.x_size,), generator=torch.Generator().manual_seed(init_seed(seed, t, r)), dtype=torch.float64
            )
            for t in group
            for r in restart_ids
        ]
        x_T = torch.stack(noise).to(device=device, dtype=dtype).reshape(rows, *problem.x_shape)
        generator = torch.Generator().manual_seed(init_seed(seed, 2**31, group[0]))
        x0 = guided_sample(prior, loss_and_grad, x_T, options.steps, options.guidance_rate, generator).clamp(-1, 1)
        images = to_model(x0)
        finals, _ = problem.evaluate(images.reshape(rows, -1))
        labels = problem.labels_of(images.reshape(rows, -1))
        recs = best_restarts(
            finals,
            images.reshape(problem.num_targets, problem.restarts, *problem.x_shape),
            labels,
            iterations=options.steps,
            seconds=time.perf_counter() - start,
        )
        results.update(zip(group, recs, strict=True))
    return [results[i] for i in range(len(views))]


ATTACKS.register(
    "ggssr",
    help="GGSS-R (Enhanced Privacy Leakage from Noise-Perturbed Gradients via Gradient-Guided Conditional "
    "Diffusion Models; spherical step of DSG, Yang et al. 2024): DDIM sampling of a diffusion prior guided by "
    "gradient matching of the denoised estimate",
    config=GgssrOptions,
)(attack)
