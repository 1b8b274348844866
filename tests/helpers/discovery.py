"""A plugin package imported again with one more module in it: what adding a file to the package does.

The new module is written to a folder of its own, and the package's ``__init__`` runs again on a fresh module
whose ``__path__`` is the package's folder plus that one: the modules it imported before are taken as they are
(already registered), the new one is imported by whatever the ``__init__`` does. A package that lists its
modules by hand never imports it; one that discovers its modules does, and the plugin registers.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any


@contextmanager
def package_with_new_module(
    package: str, module: str, source: str, folder: Path, registry: Any, name: str
) -> Iterator[ModuleType]:
    """``package`` imported again with ``source`` as its module ``module``; yields the fresh package, then removes
    the plugin ``name`` from ``registry`` and puts the package back as it was."""
    installed = importlib.import_module(package)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{module}.py").write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(
        package, installed.__file__, submodule_search_locations=[*installed.__path__, str(folder)]
    )
    assert spec is not None and spec.loader is not None
    fresh = importlib.util.module_from_spec(spec)
    sys.modules[package] = fresh
    try:
        spec.loader.exec_module(fresh)
        yield fresh
    finally:
        sys.modules[package] = installed
        sys.modules.pop(f"{package}.{module}", None)
        if name in registry:
            registry.unregister(name)
