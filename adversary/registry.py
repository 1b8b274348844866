"""Registry of gradient-inversion attacks: name -> attack (see adversary.attacks)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from fedsim.core.registry import Registry

if TYPE_CHECKING:
    from adversary.inversion.options import AttackOptions

#: separates an attack's name from one of its presets in shorthand: `dlg@paper-003`
PRESET_SEPARATOR = "@"


def split_preset(name: str) -> tuple[str, str | None]:
    """``dlg@paper-003`` -> (``dlg``, ``paper-003``); a plain name -> (name, None)."""
    base, separator, preset = name.partition(PRESET_SEPARATOR)
    return (base, preset) if separator else (name, None)


class AttackRegistry(Registry):
    """Attacks by name; ``dlg@paper-003`` selects the attack ``dlg`` (its options model applies the preset)."""

    def tag_of(self, name: str) -> str:
        return split_preset(name)[0]

    def options(self, name: str) -> type[AttackOptions]:
        """The options model of attack ``name`` (``dlg@paper-003``: ``dlg``'s); every attack registers one."""
        model = self.config(self.tag_of(name))
        if model is None:
            raise KeyError(self.unknown_message(name))
        return cast("type[AttackOptions]", model)


ATTACKS: AttackRegistry = AttackRegistry("attack")
