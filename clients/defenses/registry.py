"""name -> DefenseEntry; each defense module registers itself on import (imported at the end)."""

from __future__ import annotations

from clients.defenses.base import DefenseEntry
from fedsim.core.registry import Registry

DEFENSES: Registry[DefenseEntry] = Registry("defense")
