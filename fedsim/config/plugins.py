"""Load every plugin: fedsim's own packages, then the packages registered under the entry-point group
``fedsim.plugins``.

A plugin registers itself when its module is imported (``DEFENSES.register(...)``, ``ATTACKS.register(...)``).
An installed package ships plugins by naming a module in its entry points, e.g. in its ``pyproject.toml``::

    [project.entry-points."fedsim.plugins"]
    my_attack = "my_package.my_attack"

``fedsim.config`` calls ``load_plugins`` before it composes the config unions from the registries.
"""

from __future__ import annotations

import importlib
import logging
from importlib import metadata

import adversary.attacks  # noqa: F401  (attacks and regularizers)
import clients.defenses  # noqa: F401
import fedsim.data
import fedsim.models  # noqa: F401
import strategies  # noqa: F401  (strategies and central-DP modes)
from fedsim.core.errors import ConfigError

ENTRY_POINT_GROUP = "fedsim.plugins"

logger = logging.getLogger("fedsim")

_loaded: set[str] = set()


def load_plugins() -> list[str]:
    """Import every entry point of ``fedsim.plugins`` not imported yet; returns the modules it imported."""
    imported = []
    for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry_point.value in _loaded:
            continue
        _loaded.add(entry_point.value)
        try:
            importlib.import_module(entry_point.value.split(":")[0])
        except Exception as error:
            raise ConfigError(
                f"plugin '{entry_point.name}' ({ENTRY_POINT_GROUP} entry point '{entry_point.value}') failed to "
                f"load: {type(error).__name__}: {error}"
            ) from error
        imported.append(entry_point.value)
    return imported
