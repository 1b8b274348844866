"""Config text before validation: a YAML config file read strictly (a key written twice, an alias bomb: one line
each), and ``--set`` overrides applied to it (``fedsim.core.overrides``). Light on purpose: a command can check what it
was given before the plugins (and torch) load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from fedsim.core.errors import ConfigError


class DuplicateKey(yaml.YAMLError):
    """A mapping that names one key twice: YAML keeps the last silently, a config refuses it."""


class _StrictSafeLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key written twice in one mapping (merge keys ``<<`` may still override)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in first_line:
                raise DuplicateKey(f"key '{key}' is written twice in one mapping (lines {first_line[key]} and {line})")
            first_line[key] = line
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file '{path}' does not exist")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"config file '{path}' is not UTF-8 text (byte 0x{error.object[error.start]:02x} at offset {error.start})"
        ) from None
    try:
        raw = yaml.load(text, Loader=_StrictSafeLoader) or {}  # safe: builds plain data only
    except DuplicateKey as error:
        raise ConfigError(f"config file '{path}': {error}; keep one") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"config file '{path}' is not valid YAML{where}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file '{path}' must hold a mapping of sections, got {type(raw).__name__}")
    if expanded_size(raw) > MAX_CONFIG_VALUES:
        raise ConfigError(
            f"config file '{path}' expands to more than {MAX_CONFIG_VALUES:,} values (YAML aliases nested in "
            "aliases?); write the config out"
        )
    return raw


MAX_CONFIG_VALUES = 100_000


def expanded_size(value: Any) -> int:
    """How many values ``value`` holds once every YAML alias is expanded. The loaded object is a DAG (an
    alias is the same Python object), so this is counted per object, never by walking the expansion."""
    sizes: dict[int, int] = {}

    def size(item: Any) -> int:
        if id(item) in sizes:
            return sizes[id(item)]
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        total = 1 + sum(size(child) for child in children)
        sizes[id(item)] = total
        return total

    return size(value)
