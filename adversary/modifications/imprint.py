"""``imprint``: Robbing the Fed's imprint block (Fowl, Geiping, Czaja, Goldblum & Goldstein, ICLR 2022).

The server puts a linear layer of ``bins`` rows in front of the agreed model. Every row holds the same
measurement direction m (unit norm; brightness, a random direction, or a low Fourier mode) scaled by a small
``scale`` s, and row i's bias is -s t_i, with the thresholds t_i at quantiles of the measurement m.x over
calibration images, so that an image falls into each bin with about the same probability. After a ReLU the
bins are summed into the model's first logit: every row receives the same gradient dL/dh from a sample, and
a sample activates exactly the rows whose threshold lies below its measurement. The gradients of rows i and
i+1 then differ by sum over the samples with t_i < m.x <= t_(i+1) of dL/dh_n x_n (weight) and dL/dh_n (bias):
an image alone in its bin is their ratio, exactly, whatever other clients or images are averaged in
(``adversary.attacks.rtf``). The scale s keeps the block's effect on the logits small while leaving the
gradients unchanged (dL/dW = dL/dh x does not depend on s).

Calibration (``calibration``): ``public`` (default) uses the measurement of the public images the server
holds (a slice of the data set's test split that no client holds, recorded in the rows); ``gaussian`` assumes
the measurement is normal with the given ``mean`` and ``std`` (no data at all).

The rest of the model (``model_weights``): the gradient every bin receives from a sample is dL/dz_0, the
derivative of the loss by the first logit, and the global model decides it: a trained or uniformly initialised
model is often confident, and then dL/dz_0 = p_0 - [y = 0] is vanishingly small for most samples, whose bins
look empty or drown in the aggregate's rounding. The server sends the whole model, so by default (``server``)
it sets every weight of the agreed model too: all zero (norm layers' running statistics reset), but the output
bias, whose first entry is log(C - 1) less the bins' typical contribution. The logits then no longer depend on
the input, p_0 is about 1/2, and every sample reaches its bins with dL/dz_0 about +1/2 (y != 0) or -1/2
(y = 0), whatever state the honest model was in. ``global`` keeps the global model's weights (the block alone
is malicious), for comparison.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import torch
from pydantic import Field
from torch import nn

from adversary.modifications.base import ModificationConfig, PublicData
from adversary.modifications.registry import MODIFICATIONS, SERVED_ARCHITECTURES
from adversary.modifications.served import described_sizes

MIN_BINS, MAX_BINS = 2, 65536  # the server's config and the description a client rebuilds both keep to these


class ImprintConfig(ModificationConfig):
    name: Literal["imprint"] = Field("imprint", description="Robbing the Fed's imprint block (Fowl et al. 2022)")
    bins: int = Field(
        128, ge=MIN_BINS, le=MAX_BINS, description="rows of the imprint layer: images alone in a bin come back exactly"
    )
    measurement: Literal["brightness", "random", "fourier"] = Field(
        "brightness", description="what every row measures: mean brightness, a random direction, a low Fourier mode"
    )
    calibration: Literal["public", "gaussian"] = Field(
        "public", description="bin thresholds at quantiles of public images' measurements, or of a normal law"
    )
    public_images: int = Field(256, ge=2, description="public images for calibration (the test split's first ones)")
    mean: float = Field(0.0, description="calibration: gaussian: mean of the measurement")
    std: float = Field(1.0, gt=0, description="calibration: gaussian: standard deviation of the measurement")
    scale: float = Field(1e-4, gt=0, description="factor on the block's weights and biases (its forward effect)")
    model_weights: Literal["server", "global"] = Field(
        "server",
        description="the agreed model's weights behind the block: `server` sets them (constant logits, every "
        "sample's gradient about +-1/2 at the bins), `global` keeps the global model's",
    )


class ImprintedModel(nn.Module):
    """The agreed model behind an imprint block whose bins feed its first logit."""

    architecture = "imprint"  # its name among the served architectures (adversary.modifications.served)

    def __init__(self, model: nn.Module, input_size: int, bins: int) -> None:
        super().__init__()
        self.imprint = nn.Linear(input_size, bins)
        self.model = model

    def description(self) -> dict[str, int]:
        """What a client needs, beside the agreed model and the weights, to build this module."""
        return {"input_size": self.imprint.in_features, "bins": self.imprint.out_features}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bins = torch.relu(self.imprint(x.flatten(1)))
        logits = self.model(x)
        return torch.cat([logits[:, :1] + bins.sum(dim=1, keepdim=True), logits[:, 1:]], dim=1)


def measurement_direction(kind: str, input_shape: tuple[int, int, int], seed: int) -> torch.Tensor:
    """The unit vector m that every imprint row measures."""
    channels, height, width = input_shape
    size = channels * height * width
    if kind == "brightness":
        direction = torch.ones(size, dtype=torch.float64)
    elif kind == "random":
        direction = torch.randn(size, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    else:  # the lowest horizontal cosine mode, the same in every channel
        columns = torch.cos(math.pi * (torch.arange(width, dtype=torch.float64) + 0.5) / width)
        direction = columns.expand(channels, height, width).reshape(-1).clone()
    return direction / direction.norm()


def thresholds(config: ImprintConfig, measured: torch.Tensor | None) -> torch.Tensor:
    """``bins`` increasing thresholds: the (i + 0.5) / bins quantiles of the measurement (i = 0..bins-1) shifted
    down half a bin; the lowest sits far below every calibration image, so that every image activates a bin."""
    levels = torch.arange(config.bins, dtype=torch.float64) / config.bins
    if measured is None:
        normal = torch.distributions.Normal(
            torch.tensor(config.mean, dtype=torch.float64), torch.tensor(config.std, dtype=torch.float64)
        )
        inner = normal.icdf(levels[1:].clamp(1e-6, 1 - 1e-6))
        lowest = torch.tensor([config.mean - 10 * config.std], dtype=torch.float64)
    else:
        inner = torch.quantile(measured.double(), levels[1:])
        spread = float(measured.max() - measured.min()) or 1.0
        lowest = (measured.min().double() - 10 * spread).reshape(1)
    return torch.cat([lowest, inner])


def bins_sum(config: ImprintConfig, cuts: torch.Tensor, measured: float) -> float:
    """What the block adds to the first logit for an image of measurement ``measured``: s * sum_i (m.x - t_i)_+."""
    return float(config.scale * torch.relu(measured - cuts).sum())


def set_constant_logits(model: nn.Module, num_classes: int, first_logit: float) -> torch.Tensor:
    """Zero every parameter of ``model`` (norm layers' running statistics reset) except the output bias, whose
    first entry becomes ``first_logit``: its logits are then (first_logit, 0, ..., 0) whatever the input; returns
    those logits.

    The output bias is the last parameter registered with one entry per class (the final layer's bias in every
    model fedsim builds); the logits are checked afterwards, so a model whose output is not an affine map of the
    zeroed layers is refused in one line rather than served with unknown gradients."""
    with torch.no_grad():
        for module in model.modules():
            # BatchNorm: the global running statistics are the honest model's state too
            if hasattr(module, "reset_running_stats"):
                module.reset_running_stats()
        parameters = list(model.parameters())
        for parameter in parameters:
            parameter.zero_()
        biases = [p for p in parameters if p.ndim == 1 and p.numel() == num_classes]
        if not biases:
            raise ValueError(
                f"imprint: model_weights = server needs an output bias of {num_classes} entries; "
                f"{type(model).__name__} has none; allowed: model_weights: global"
            )
        biases[-1][0] = first_logit
    target = torch.zeros(num_classes)
    target[0] = first_logit
    return target


def check_constant_logits(model: nn.Module, probe: torch.Tensor, target: torch.Tensor) -> None:
    """Refuse (one line) a zeroed model whose logits on ``probe`` are not ``target``."""
    was_training = model.training
    model.eval()  # eval: no running statistics move, no dropout draws
    with torch.no_grad():
        logits = model(probe.to(next(model.parameters()).dtype))
    model.train(was_training)
    if not torch.allclose(logits, target.to(logits.dtype).expand_as(logits), atol=1e-6):
        raise ValueError(
            f"imprint: model_weights = server: {type(model).__name__}'s logits still depend on the input after "
            "its weights were zeroed; allowed: model_weights: global"
        )


def build_imprint(
    config: ImprintConfig,
    model: nn.Module,
    input_shape: tuple[int, int, int],
    num_classes: int,
    public: PublicData | None,
    seed: int,
) -> nn.Module:
    direction = measurement_direction(config.measurement, input_shape, seed)
    if config.calibration == "public":
        if public is None or len(public.images) == 0:
            raise ValueError("imprint: calibration public needs public images (the data set's test split)")
        measured = public.images.flatten(1).double() @ direction
    else:
        measured = None
    cuts = thresholds(config, measured)
    if config.model_weights == "server":
        typical = float(measured.median()) if measured is not None else config.mean
        # p_0 = 1/2 for a typical image: the other C - 1 logits are 0, so z_0 = log(C - 1) with the bins included
        first_logit = math.log(max(num_classes - 1, 1)) - bins_sum(config, cuts, typical)
        target = set_constant_logits(model, num_classes, first_logit)
        probe = (
            public.images[:2]
            if public is not None and len(public.images)
            else torch.rand(2, *input_shape, generator=torch.Generator().manual_seed(seed))
        )
        check_constant_logits(model, probe, target)
    imprinted = ImprintedModel(model, direction.numel(), config.bins)
    with torch.no_grad():
        dtype = imprinted.imprint.weight.dtype
        imprinted.imprint.weight.copy_((config.scale * direction).expand(config.bins, -1).to(dtype))
        imprinted.imprint.bias.copy_((-config.scale * cuts).to(dtype))
    return imprinted


MODIFICATIONS.register(
    "imprint", help="Robbing the Fed (Fowl et al. 2022): an imprint block in front of the model", config=ImprintConfig
)(build_imprint)


@SERVED_ARCHITECTURES.register(ImprintedModel.architecture, help="the agreed model behind an imprint block")
def rebuild_imprinted(model: nn.Module, description: Mapping[str, Any], input_shape: tuple[int, ...]) -> ImprintedModel:
    """The block a server described, for this client's images: its input size must be theirs, its bins within the
    config's bounds (at most ``MAX_BINS`` x the image's values, whatever the server asks)."""
    size = math.prod(input_shape)
    allowed = {"input_size": range(size, size + 1), "bins": range(MIN_BINS, MAX_BINS + 1)}
    sizes = described_sizes(description, ImprintedModel.architecture, allowed)
    return ImprintedModel(model, sizes["input_size"], sizes["bins"])
