"""``Registry``: name -> plugin, with its help line and its config model; imports nothing of the project.

``fedsim.config`` composes the discriminated unions of ``client.defenses[]``, ``adversary.attacks[]``, ...
from the registries. Each plugin package declares its registries in its ``registry.py`` and
``import_submodules`` imports every module of the package, so that adding a plugin is adding its file.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

from pydantic import BaseModel

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to plugins, each with a help line and (optionally) its config model.

    Unknown names fail with the list of what is allowed and the closest name.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._help: dict[str, str] = {}
        self._configs: dict[str, type[BaseModel]] = {}

    def register(self, name: str, help: str = "", config: type[BaseModel] | None = None) -> Callable[[T], T]:
        """Decorator registering ``obj`` under ``name``; ``config`` is the pydantic model of its options."""

        def decorator(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._entries[name] = obj
            doc_lines = (getattr(obj, "__doc__", None) or "").strip().splitlines()
            self._help[name] = help or (doc_lines[0] if doc_lines else "")
            if config is not None:
                self._configs[name] = config
            return obj

        return decorator

    def unregister(self, name: str) -> None:
        """Forget ``name`` (tests that register a plugin of their own clean up with it)."""
        self.get(name)
        del self._entries[name], self._help[name]
        self._configs.pop(name, None)

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(self.unknown_message(name)) from None

    def config(self, name: str) -> type[BaseModel] | None:
        """The config model ``name`` registered with (None: it takes no options of its own)."""
        self.get(name)
        return self._configs.get(name)

    def configs(self) -> dict[str, type[BaseModel]]:
        """name -> config model, for every entry that has one, in name order."""
        return {name: self._configs[name] for name in sorted(self._configs)}

    def unknown_message(self, name: str) -> str:
        allowed = ", ".join(sorted(self._entries)) or "none registered"
        close = difflib.get_close_matches(name, list(self._entries), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"unknown {self.kind} '{name}'{hint}; allowed: {allowed}"

    def describe(self) -> dict[str, str]:
        return {name: self._help[name] for name in sorted(self._entries)}

    def tag_of(self, name: str) -> str:
        """The entry that ``name`` selects (a registry of families maps ``tv:vgg16`` to ``tv``)."""
        return name

    def label(self, name: str) -> str:
        """How entry ``name`` is shown to users (`fedsim list`, the config reference)."""
        return name

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def names(self) -> list[str]:
        return sorted(self._entries)


def import_submodules(package: str, path: Iterable[str]) -> None:
    """Import every module of ``package`` (its ``__path__``), in name order: plugins register themselves on import,
    so adding one is adding its file."""
    for module in sorted(pkgutil.iter_modules(path), key=lambda info: info.name):
        importlib.import_module(f"{package}.{module.name}")
