"""Registry of gradient-inversion attacks: name -> attack (see adversary.attacks)."""

from fedsim.core.registry import Registry

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


ATTACKS: AttackRegistry = AttackRegistry("attack")
