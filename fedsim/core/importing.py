"""Import an object of the user's code named as ``module:name``, from a folder put first on ``sys.path``."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any


def on_path(folder: Path) -> str:
    """Put ``folder`` first on ``sys.path`` (once); processes spawned later inherit it."""
    resolved = str(Path(folder).expanduser().resolve())
    if resolved not in sys.path:
        sys.path.insert(0, resolved)
    return resolved


def import_object(target: str, path: Path | None, field: str, error: type[Exception] = ValueError) -> Any:
    """The object ``module:name`` names (``name`` may be dotted), imported with ``path`` first on ``sys.path``.

    Every failure is one ``error`` line naming ``field`` and its value.
    """
    module_name, separator, attribute = target.partition(":")
    if not (module_name and separator and attribute):
        raise error(f"{field} = {target!r}: not `module:name` (e.g. pytorchexample.task:Net)")
    if path is not None:
        on_path(path)
    try:
        module = importlib.import_module(module_name)
    except ImportError as reason:
        where = f" from {path}" if path is not None else ""
        raise error(f"{field} = {target!r}: cannot import {module_name!r}{where} ({reason})") from None
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise error(f"{field} = {target!r}: module {module_name!r} has no {attribute!r}")
        found = getattr(found, part)
    return found
