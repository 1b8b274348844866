"""`tv:<name>`: any torchvision classification model, adapted to the data set's channels, classes and size.

torchvision builds ImageNet models (3 channels, 1000 classes, 224 px). Here the class count goes to the
constructor (or replaces the final layer when pretrained weights bring 1000 classes), the first
convolution is swapped for one with the data set's channel count, and a cheap dummy forward at build
time turns "this network cannot see images that small" into a one-line ModelError instead of a crash
in the middle of a federated round. Pretrained weights come only from the local torch hub cache.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlparse

import torch
from pydantic import Field, field_validator, model_validator
from torch import nn

from fedsim.core.errors import first_line
from fedsim.models.registry import MODELS, ModelConfig, ModelError

TV_PREFIX = "tv:"
#: Constructor argument of models whose architecture is tied to the input size (positional embeddings,
#: attention windows); without pretrained weights they are built for the data set's size.
SIZE_ARGUMENT = {"vit_": "image_size", "maxvit_": "input_size"}
#: Models whose auxiliary heads would make training-mode forward return a tuple instead of logits.
AUX_HEAD_MODELS = ("googlenet", "inception_v3")
#: Largest side tried when looking for the smallest image a model accepts (data.image_size <= 1024).
MAX_PROBE_SIDE = 1024


if TYPE_CHECKING:
    import torchvision


@functools.cache
def torchvision_classifiers() -> tuple[str, ...]:
    """Names of torchvision's image classifiers (detection, segmentation, video, quantized excluded)."""
    import torchvision  # importing torchvision takes a second: only configs naming a tv: model need it

    return tuple(torchvision.models.list_models(module=torchvision.models))


def is_torchvision_name(name: str) -> bool:
    return name.startswith(TV_PREFIX)


def check_torchvision_name(name: str) -> None:
    """Accept ``tv:<name>`` for a torchvision classifier; otherwise fail with close matches."""
    tv_name = name.removeprefix(TV_PREFIX)
    if tv_name in torchvision_classifiers():
        return
    close = difflib.get_close_matches(tv_name, torchvision_classifiers(), n=3)
    hint = f" (did you mean {', '.join(repr(TV_PREFIX + c) for c in close)}?)" if close else ""
    raise ModelError(
        f"unknown torchvision classifier '{name}'{hint}; allowed: tv:<name> for a name in "
        "torchvision.models.list_models(module=torchvision.models), e.g. tv:resnet18, tv:vgg16, tv:mobilenet_v2"
    )


def pretrained_weights_path(tv_name: str) -> tuple[torchvision.models.WeightsEnum, Path]:
    """torchvision's default weights for ``tv_name`` and where torch.hub keeps their file."""
    import torchvision

    weights = torchvision.models.get_model_weights(tv_name).DEFAULT
    filename = Path(urlparse(weights.url).path).name  # the name torch.hub.load_state_dict_from_url caches under
    return weights, Path(torch.hub.get_dir()) / "checkpoints" / filename


class TorchvisionModelConfig(ModelConfig):
    """A torchvision classifier as it is: its own activations, widths, normalisation and dropout."""

    name: str = Field(..., description="`tv:<name>` for a torchvision classifier, e.g. tv:resnet18")
    pretrained: bool = Field(
        False, description="torchvision's weights from the local torch cache (nothing is downloaded)"
    )

    @field_validator("name")
    @classmethod
    def _torchvision_classifier(cls, value: str) -> str:
        if not value.startswith(TV_PREFIX):
            raise ValueError(f"'{value}' is not a torchvision model name; use {TV_PREFIX}<name>, e.g. tv:resnet18")
        check_torchvision_name(value)
        return value

    @model_validator(mode="after")
    def _pretrained_weights_stay(self) -> TorchvisionModelConfig:
        if self.pretrained and self.init == "uniform":
            raise ValueError("init = 'uniform': would overwrite the pretrained weights; use init: default")
        return self


@MODELS.register(
    "tv",
    help="any torchvision classifier, adapted to channels, classes and image size",
    config=TorchvisionModelConfig,
    family="torchvision classifier",
)
def build_torchvision_model(
    cfg: TorchvisionModelConfig, in_channels: int, num_classes: int, image_size: int
) -> nn.Module:
    """Build ``cfg.name`` = ``tv:<name>`` for ``in_channels`` x ``image_size``^2 inputs and ``num_classes``."""
    import torchvision

    check_torchvision_name(cfg.name)
    tv_name = cfg.name.removeprefix(TV_PREFIX)
    kwargs = _constructor_kwargs(tv_name, image_size, cfg.pretrained)
    if cfg.pretrained:
        model, pretrained_classes = _build_pretrained(cfg.name, tv_name, image_size, kwargs)
        _replace_head(model, cfg.name, pretrained_classes, num_classes)
    else:
        try:
            model = torchvision.models.get_model(tv_name, weights=None, num_classes=num_classes, **kwargs)
        except (AssertionError, ValueError, RuntimeError) as error:  # e.g. ViT: size not divisible by patch
            raise ModelError(
                f"model.name = '{cfg.name}': cannot be built for {image_size} px images ({first_line(error)})"
            ) from None
    _drop_aux_heads(model)
    if in_channels != 3:
        _adapt_first_conv(model, cfg.name, in_channels, from_pretrained=cfg.pretrained)
    check_input_size(model, cfg.name, in_channels, num_classes, image_size)
    return model


# ------------------------------------------------------------------------------------------ options


def _constructor_kwargs(tv_name: str, image_size: int, pretrained: bool) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if tv_name in AUX_HEAD_MODELS:
        if not pretrained:  # with weights torchvision insists on its own values for both
            # init_weights=True is torchvision's default anyway; passing it silences a FutureWarning.
            kwargs.update(aux_logits=False, init_weights=True)
        # transform_input re-normalises three ImageNet-normalised channels for Google's weights. It is off
        # always (torchvision's default without weights): it breaks other channel counts, and a pretrained
        # build must behave like the weight-less copies that clients build and load the state into.
        kwargs["transform_input"] = False
    if not pretrained:
        for prefix, argument in SIZE_ARGUMENT.items():
            if tv_name.startswith(prefix):
                kwargs[argument] = image_size if argument == "image_size" else (image_size, image_size)
    return kwargs


# --------------------------------------------------------------------------------------- pretrained


def _build_pretrained(name: str, tv_name: str, image_size: int, kwargs: dict[str, Any]) -> tuple[nn.Module, int]:
    """The model with torchvision's default weights, and how many classes those weights score."""
    import torchvision

    weights, path = pretrained_weights_path(tv_name)
    if not path.is_file():
        raise ModelError(
            f"model.pretrained = true: the weights file '{path.name}' for {name} is not in the local torch hub "
            f"cache; put it at {path} (it is {weights.url}); nothing is downloaded"
        )
    fixed_side = weights.meta.get("min_size", (0, 0))[0]
    if any(tv_name.startswith(prefix) for prefix in SIZE_ARGUMENT) and image_size != fixed_side:
        raise ModelError(
            f"model.pretrained = true: the {name} weights need images of exactly {fixed_side} px, got {image_size} "
            f"(set data.image_size: {fixed_side})"
        )
    with _weights_only_from(path):
        try:
            model = torchvision.models.get_model(tv_name, weights=weights, **kwargs)
        except RuntimeError as error:  # load_state_dict: a different file saved under the expected name
            raise ModelError(f"model.pretrained = true: '{path}' does not fit {name} ({first_line(error)})") from None
    return model, len(weights.meta["categories"])


@contextlib.contextmanager
def _weights_only_from(path: Path) -> Iterator[None]:
    """Route torchvision's weight loading to ``path``, loaded with ``weights_only=True``, never the network.

    torchvision's builders also apply per-model fix-ups while loading (constructor arguments implied by
    the weights, DenseNet's renamed keys), so they are kept; only the loader they call is replaced,
    because torch.hub's loader would download a missing file and unpickles with ``weights_only=False``.
    """
    from torchvision.models import _api as torchvision_api

    def load(url: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if Path(urlparse(url).path).name != path.name:
            raise ModelError(f"model.pretrained = true: torchvision asked for {url}, expected {path.name}")
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # torch.load raises many types for truncated or non-weights files
            raise ModelError(
                f"model.pretrained = true: '{path}' cannot be read as weights ({first_line(error)})"
            ) from None

    original = torchvision_api.load_state_dict_from_url
    torchvision_api.load_state_dict_from_url = load
    try:
        yield
    finally:
        torchvision_api.load_state_dict_from_url = original


def _replace_head(model: nn.Module, name: str, pretrained_classes: int, num_classes: int) -> None:
    """Swap the last layer that scores the pretrained classes for a freshly initialised ``num_classes`` one."""
    for module_name, module in reversed(list(model.named_modules())):
        if isinstance(module, nn.Linear) and module.out_features == pretrained_classes:
            if num_classes != pretrained_classes:
                model.set_submodule(
                    module_name, nn.Linear(module.in_features, num_classes, bias=module.bias is not None)
                )
            return
        if isinstance(module, nn.Conv2d) and module.out_channels == pretrained_classes:  # SqueezeNet: a 1x1 conv
            if num_classes != pretrained_classes:
                model.set_submodule(module_name, _conv_like(module, module.in_channels, out_channels=num_classes))
            return
    raise ModelError(
        f"model.name = '{name}': found no {pretrained_classes}-class output layer to replace for {num_classes} classes"
    )


def _drop_aux_heads(model: nn.Module) -> None:
    # Pretrained Inception-v3 keeps its auxiliary head; training-mode forward would then return a tuple.
    if getattr(model, "aux_logits", False):
        model.aux_logits = False  # type: ignore[assignment]  # torch types Module.__setattr__ for tensors and modules only
        for attribute in ("AuxLogits", "aux1", "aux2"):
            if hasattr(model, attribute):
                setattr(model, attribute, None)


# --------------------------------------------------------------------------------------- first conv


def _conv_like(conv: nn.Conv2d, in_channels: int, out_channels: int | None = None) -> nn.Conv2d:
    return nn.Conv2d(
        in_channels,
        conv.out_channels if out_channels is None else out_channels,
        # a Conv2d's own sizes are pairs (torch types them as tuples of any length)
        kernel_size=cast(tuple[int, int], conv.kernel_size),
        stride=cast(tuple[int, int], conv.stride),
        padding=cast(tuple[int, int] | str, conv.padding),
        dilation=cast(tuple[int, int], conv.dilation),
        bias=conv.bias is not None,
        padding_mode=conv.padding_mode,
    )


def _adapt_first_conv(model: nn.Module, name: str, in_channels: int, from_pretrained: bool) -> None:
    """Replace the first Conv2d (the stem in every torchvision classifier) by one taking ``in_channels``.

    Pretrained RGB filters are summed over colour and spread evenly over the new channels, so an image
    whose channels are all equal gets the response its grey RGB version had. Randomly initialised
    filters are reused channel by channel (cycling), which keeps the model's own init scheme.
    """
    found = next(((n, m) for n, m in model.named_modules() if isinstance(m, nn.Conv2d)), None)
    if found is None:
        raise ModelError(f"model.name = '{name}': has no Conv2d to adapt to {in_channels} input channels")
    conv_name, conv = found
    if conv.groups != 1:
        raise ModelError(f"model.name = '{name}': its first convolution is grouped; only 3-channel input works")
    new = _conv_like(conv, in_channels)
    with torch.no_grad():
        if from_pretrained:
            new.weight.copy_(conv.weight.sum(dim=1, keepdim=True).expand_as(new.weight) / in_channels)
        else:
            new.weight.copy_(conv.weight[:, [c % conv.in_channels for c in range(in_channels)]])
        if conv.bias is not None and new.bias is not None:  # built with a bias exactly when conv has one
            new.bias.copy_(conv.bias)
    model.set_submodule(conv_name, new)


# --------------------------------------------------------------------------------------- input size


def check_input_size(model: nn.Module, name: str, in_channels: int, num_classes: int, image_size: int) -> None:
    """Dummy-forward one image; on failure report the smallest side that works (or torchvision's reason)."""
    error = _forward_error(model, in_channels, num_classes, image_size)
    if error is None:
        return
    smallest = _smallest_working_side(model, in_channels, num_classes, image_size)
    if smallest is None:
        raise ModelError(
            f"model.name = '{name}': a {in_channels}x{image_size}x{image_size} dummy image fails ({error})"
        )
    raise ModelError(f"model.name = '{name}': needs images of at least {smallest} px, got {image_size}")


def _forward_error(model: nn.Module, in_channels: int, num_classes: int, side: int) -> str | None:
    was_training = model.training
    model.eval()  # a batch of one through BatchNorm, and no running statistics updated
    try:
        with torch.no_grad():
            output = model(torch.zeros(1, in_channels, side, side))
    except (RuntimeError, ValueError, AssertionError, IndexError) as error:
        return first_line(error)
    finally:
        model.train(was_training)
    if not isinstance(output, torch.Tensor) or tuple(output.shape) != (1, num_classes):
        shape = tuple(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
        return f"output is {shape}, expected (1, {num_classes})"
    return None


def _smallest_working_side(model: nn.Module, in_channels: int, num_classes: int, failing: int) -> int | None:
    """Double the side until a forward works, then bisect (stacked conv/pool layers fail monotonically)."""
    low, high = failing, None
    while high is None and low < MAX_PROBE_SIDE:
        side = min(2 * low, MAX_PROBE_SIDE)
        if _forward_error(model, in_channels, num_classes, side) is None:
            high = side
        else:
            low = side
    if high is None:
        return None
    while high - low > 1:
        middle = (low + high) // 2
        if _forward_error(model, in_channels, num_classes, middle) is None:
            high = middle
        else:
            low = middle
    return high
