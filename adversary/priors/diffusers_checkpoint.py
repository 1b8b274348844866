"""A diffusers checkpoint as a prior: a folder (``fedsim prior train`` writes one) or a hub id.

The folder holds ``unet/`` (a ``UNet2DModel``) and ``scheduler/`` (a DDPM/DDIM scheduler config), as
diffusers' pipelines save them; a single-model folder (``config.json`` of the UNet at its root) also loads,
with the linear DDPM schedule. Hub ids (e.g. ``google/ddpm-cifar10-32``) load from the local cache only when
``offline`` (or HF_HUB_OFFLINE=1), and a missing checkpoint is one line naming it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field

from adversary.priors.base import PriorConfig, linear_alphas_cumprod
from adversary.priors.registry import PRIORS


class DiffusersPrior:
    def __init__(self, unet: Any, alphas_cumprod: torch.Tensor):
        self.unet = unet
        self.alphas_cumprod = alphas_cumprod

    def predict_noise(self, x_t: torch.Tensor, t: int) -> torch.Tensor:
        steps = torch.full((x_t.shape[0],), int(t), device=x_t.device, dtype=torch.long)
        return self.unet(x_t, steps).sample


def _image_shape(channels: int, sample_size: int | list[int] | tuple[int, int]) -> tuple[int, int, int]:
    height, width = (sample_size, sample_size) if isinstance(sample_size, int) else sample_size
    return (int(channels), int(height), int(width))


class DiffusersPriorConfig(PriorConfig):
    name: Literal["diffusers"] = Field("diffusers", description="a diffusers checkpoint folder or hub id")
    path: str = Field(..., description="diffusers checkpoint folder or hub id (e.g. google/ddpm-cifar10-32)")
    offline: bool | None = Field(None, description="load from local files only (default: HF_HUB_OFFLINE)")

    def image_shape(self) -> tuple[int, int, int] | None:
        """From a local folder's UNet config (a hub id is checked when it loads)."""
        root = Path(self.path).expanduser()
        for config in (root / "unet" / "config.json", root / "config.json"):
            if config.is_file():
                spec = json.loads(config.read_text())
                return _image_shape(spec["in_channels"], spec["sample_size"])
        return None

    def load(self, shape: tuple[int, ...], device: torch.device, dtype: torch.dtype) -> DiffusersPrior:
        try:
            from diffusers import DDPMScheduler, UNet2DModel
        except ImportError:  # pragma: no cover - diffusers is a dependency
            raise ValueError("prior diffusers needs the diffusers package: pip install diffusers") from None
        offline = self.offline if self.offline is not None else os.environ.get("HF_HUB_OFFLINE") == "1"
        root = Path(self.path).expanduser()
        subfolder = "unet" if (root / "unet").is_dir() or not root.exists() else None
        try:
            # low_cpu_mem_usage=False: the small priors need no `accelerate` (nor its warning on every load)
            unet = UNet2DModel.from_pretrained(
                str(root) if root.exists() else self.path,
                subfolder=subfolder,
                local_files_only=offline,
                torch_dtype=dtype,
                low_cpu_mem_usage=False,
            )
        except (OSError, ValueError) as error:
            raise ValueError(
                f"prior.path = {self.path!r}: no diffusers UNet2DModel could be loaded "
                f"({'offline, ' if offline else ''}{str(error).splitlines()[0]})"
            ) from None
        try:
            scheduler = DDPMScheduler.from_pretrained(
                str(root) if root.exists() else self.path, subfolder="scheduler", local_files_only=offline
            )
            alphas = scheduler.alphas_cumprod.to(torch.float64)
        except (OSError, ValueError):
            alphas = linear_alphas_cumprod(1000)
        config = unet.config
        expected = _image_shape(config.in_channels, config.sample_size)
        if tuple(shape) != expected:
            raise ValueError(
                f"prior.path = {self.path!r}: the prior makes images of shape {expected}, "
                f"the attacked model takes {tuple(shape)}"
            )
        unet = unet.to(device=device).eval().requires_grad_(False)
        return DiffusersPrior(unet, alphas.to(device=device, dtype=dtype))


PRIORS.register(
    "diffusers",
    help="a diffusers UNet2DModel checkpoint: a folder (fedsim prior train) or a hub id",
    config=DiffusersPriorConfig,
)(DiffusersPriorConfig)
