"""``--set key.path=value`` overrides of a raw config (before validation), as ``fedsim run --set`` and the
sweep grid apply them."""

from __future__ import annotations

from typing import Any

import yaml

from fedsim.core.errors import ConfigError


def apply_override(raw: dict[str, Any], assignment: str) -> None:
    """Apply one ``key.path=value`` override in place; the value is parsed as YAML."""
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment!r}: expected KEY.PATH=VALUE, e.g. client.lr=0.05")
    key, text = assignment.split("=", 1)
    if not [p for p in key.strip().split(".") if p]:
        raise ConfigError(f"--set {assignment!r}: empty key")
    set_key(raw, key, parse_value(text))


def parse_value(text: str) -> Any:
    """A command-line value, read as YAML (``0.1``, ``[1, 2]``, ``{name: prune}``); unparsable text stays text."""
    try:
        return yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        return text


def set_key(raw: dict[str, Any], key: str, value: Any, flag: str = "--set") -> None:
    """Set ``key.path`` (list indexes as numbers, e.g. ``client.defenses.0.sigma``) in a raw config, in place.

    Missing sections are created, so that an unknown key reaches validation and gets its one-line error;
    ``flag`` names the option the key came from in error messages.
    """
    parts = [p for p in key.strip().split(".") if p]
    node: Any = raw
    for i, part in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        if isinstance(node, list):
            node = _list_slot(node, part, key, flag)
            continue
        if not isinstance(node, dict):
            raise ConfigError(f"{flag} {key}: '{parts[i - 1]}' is a value ({node!r}), not a section")
        if part not in node or node[part] is None or isinstance(node[part], str):
            # a string here is a shorthand (e.g. `partition: iid`) that the override expands
            node[part] = [] if nxt.isdigit() else ({"name": node[part]} if isinstance(node.get(part), str) else {})
        node = node[part]
    last = parts[-1]
    if isinstance(node, list):
        index = int(last) if last.isdigit() else None
        if index is None or index > len(node):
            raise ConfigError(f"{flag} {key}: '{last}' is not a valid index into a list of {len(node)}")
        if index == len(node):
            node.append(value)
        else:
            node[index] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ConfigError(f"{flag} {key}: '{parts[-2]}' is a value ({node!r}), not a section")


def _list_slot(node: list[Any], part: str, key: str, flag: str = "--set") -> Any:
    if not part.isdigit() or int(part) > len(node):
        raise ConfigError(f"{flag} {key}: '{part}' is not a valid index into a list of {len(node)}")
    if int(part) == len(node):
        node.append({})
    if isinstance(node[int(part)], str):  # a shorthand entry (`attacks: [ig]`) that the override expands
        node[int(part)] = {"name": node[int(part)]}
    return node[int(part)]
