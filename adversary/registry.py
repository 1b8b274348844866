"""Registry of gradient-inversion attacks: name -> attack (see adversary.attacks)."""

from fedsim.core.registry import Registry

ATTACKS: Registry = Registry("attack")
