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

    Parameters
    ----------
    kind
        What the entries are, as messages name them (``"attack"``, ``"data set"``).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._help: dict[str, str] = {}
        self._configs: dict[str, type[BaseModel]] = {}

    def register(self, name: str, help: str = "", config: type[BaseModel] | None = None) -> Callable[[T], T]:
        """Decorator registering a plugin under ``name``.

        Parameters
        ----------
        name
            The name configs select it by.
        help
            Its one-line description (`fedsim list`, the config reference); empty: the first line of the
            plugin's docstring.
        config
            The pydantic model of its options (None: it takes none of its own).

        Returns
        -------
        Callable
            The decorator; it returns the plugin unchanged and raises ValueError when ``name`` is taken.
        """

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
        """Forget an entry (tests that register a plugin of their own clean up with it).

        Parameters
        ----------
        name
            A registered name.

        Raises
        ------
        KeyError
            ``name`` is not registered (the message lists what is).
        """
        self.get(name)
        del self._entries[name], self._help[name]
        self._configs.pop(name, None)

    def get(self, name: str) -> T:
        """The plugin registered under ``name``.

        Parameters
        ----------
        name
            A registered name.

        Returns
        -------
        T
            The plugin.

        Raises
        ------
        KeyError
            ``name`` is not registered: the message lists what is allowed and the closest name.
        """
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(self.unknown_message(name)) from None

    def config(self, name: str) -> type[BaseModel] | None:
        """The config model an entry registered with.

        Parameters
        ----------
        name
            A registered name.

        Returns
        -------
        type[BaseModel] or None
            Its options model (None: it takes no options of its own).

        Raises
        ------
        KeyError
            ``name`` is not registered.
        """
        self.get(name)
        return self._configs.get(name)

    def configs(self) -> dict[str, type[BaseModel]]:
        """name -> config model, for every entry that has one, in name order."""
        return {name: self._configs[name] for name in sorted(self._configs)}

    def unknown_message(self, name: str) -> str:
        """The one-line error for a name that is not registered.

        Parameters
        ----------
        name
            The name asked for.

        Returns
        -------
        str
            ``unknown <kind> '<name>' (did you mean '...'?); allowed: ...``.
        """
        allowed = ", ".join(sorted(self._entries)) or "none registered"
        close = difflib.get_close_matches(name, list(self._entries), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"unknown {self.kind} '{name}'{hint}; allowed: {allowed}"

    def describe(self) -> dict[str, str]:
        """name -> help line, for every entry, in name order."""
        return {name: self._help[name] for name in sorted(self._entries)}

    def tag_of(self, name: str) -> str:
        """The entry that a config's name selects.

        Parameters
        ----------
        name
            The name as a config writes it.

        Returns
        -------
        str
            The entry (a registry of families maps ``tv:vgg16`` to ``tv``); the name itself here.
        """
        return name

    def label(self, name: str) -> str:
        """How an entry is shown to users (`fedsim list`, the config reference).

        Parameters
        ----------
        name
            A registered name.

        Returns
        -------
        str
            Its label (the name itself here; a registry of families adds the pattern it accepts).
        """
        return name

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._entries)


def import_submodules(package: str, path: Iterable[str]) -> None:
    """Import every module of a package, in name order: plugins register themselves on import, so adding one
    is adding its file.

    Parameters
    ----------
    package
        The package's dotted name (``__name__`` inside it).
    path
        Its ``__path__``.
    """
    for module in sorted(pkgutil.iter_modules(path), key=lambda info: info.name):
        importlib.import_module(f"{package}.{module.name}")
