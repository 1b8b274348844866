"""Registry of gradient-inversion attacks: name -> attack (see adversary.attacks)."""

from fedsim.base import Registry

ATTACKS: Registry = Registry("attack")
