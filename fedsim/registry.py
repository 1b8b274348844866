"""A tiny name -> object registry shared by data sets, models, strategies (and later defenses, attacks)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to factories; unknown names fail with the list of what is allowed."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._help: dict[str, str] = {}

    def register(self, name: str, help: str = "") -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._entries[name] = obj
            doc_lines = (getattr(obj, "__doc__", None) or "").strip().splitlines()
            self._help[name] = help or (doc_lines[0] if doc_lines else "")
            return obj

        return decorator

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        allowed = ", ".join(sorted(self._entries)) or "none registered"
        close = difflib.get_close_matches(name, list(self._entries), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"unknown {self.kind} '{name}'{hint}; allowed: {allowed}"

    def describe(self) -> dict[str, str]:
        return {name: self._help[name] for name in sorted(self._entries)}

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def names(self) -> list[str]:
        return sorted(self._entries)
