"""name -> malicious-server model modification, with its config model; each modification's module registers itself."""

from __future__ import annotations

from adversary.modifications.base import Modification
from fedsim.core.registry import Registry

MODIFICATIONS: Registry[Modification] = Registry("model modification")
