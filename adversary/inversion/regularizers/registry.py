"""name -> regularizer term, with its help line and config model; each term's module registers itself."""

from __future__ import annotations

from adversary.inversion.regularizers.base import Regularizer
from fedsim.core.registry import Registry

REGULARIZERS: Registry[Regularizer] = Registry("regularizer")
