"""Generative priors (denoisers with a noise schedule) for attacks that sample images, e.g. ``ggssr``.

One module per prior; each registers itself in ``PRIORS`` when this package imports it.
"""

from adversary.priors.base import Prior, PriorConfig, linear_alphas_cumprod
from adversary.priors.registry import PRIORS
from fedsim.core.registry import import_submodules

import_submodules(__name__, __path__)

__all__ = ["PRIORS", "Prior", "PriorConfig", "linear_alphas_cumprod"]
