"""A raw config checked against the config's JSON Schema, shipped as a file: what a command can refuse in one line
before the plugins (and torch, Flower and Ray) load. What the schema cannot say (a cross-field rule, a renamed key)
is left to the full validation, which runs later anyway.

A plugin list (``adversary.attacks``, ``client.defenses``) is a ``oneOf`` over the plugins' configs: the error
reported is the one of the config its ``name`` picks, or, for an unknown name, the names there are.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from fedsim.core.errors import ConfigError

TAG = "name"


@cache
def load_schema(path: str) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def check_against_schema(raw: dict[str, Any], schema_path: Path) -> None:
    """ConfigError naming the first key the schema refuses (path, value, what is allowed); nothing otherwise."""
    schema = load_schema(str(schema_path))
    error = _most_relevant(raw, schema)
    if error is None:
        return
    path, instance, message = _explained(error, schema)
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path).lstrip(".") or "config"
    raise ConfigError(f"{where} = {instance!r}: {message}")


def _explained(error: Any, schema: dict[str, Any]) -> tuple[list[Any], Any, str]:
    """The innermost reason for ``error``: a plugin config's own error rather than 'not valid under any'."""
    path = list(error.absolute_path)
    if error.validator in ("oneOf", "anyOf") and isinstance(error.instance, dict):
        branches = [leaf for branch in error.validator_value for leaf in _alternatives(branch, schema)]
        names = [name for branch in branches for name in _tag_values(branch)]
        tag = error.instance.get(TAG)
        if names and tag not in names:
            return [*path, TAG], tag, f"not one of {', '.join(sorted(names))}"
        for branch in branches:
            if tag in _tag_values(branch):
                inner = _most_relevant(error.instance, {**branch, "$defs": schema["$defs"]})
                if inner is not None:
                    inner_path, instance, message = _explained(inner, schema)
                    return [*path, *inner_path], instance, message
    if error.validator in ("oneOf", "anyOf"):  # e.g. a list where a name alone is allowed too: the list's own error
        typed = [
            leaf
            for branch in error.validator_value
            for leaf in _alternatives(branch, schema)
            if _typed_as(leaf, error.instance)
        ]
        if len(typed) == 1:
            inner = _most_relevant(error.instance, {**typed[0], "$defs": schema["$defs"]})
            if inner is not None:
                inner_path, instance, message = _explained(inner, schema)
                return [*path, *inner_path], instance, message
    if error.validator in ("oneOf", "anyOf") and error.context:  # a number or null, say: why neither
        return path, error.instance, " and ".join(dict.fromkeys(inner.message for inner in error.context))
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        return [*path, extra[0]], error.instance[extra[0]], f"no such key here; allowed: {', '.join(allowed)}"
    return path, error.instance, error.message


def _most_relevant(instance: Any, schema: dict[str, Any]) -> Any:
    """The error jsonschema ranks first, not descended into (``_explained`` picks the branch a name chooses)."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import relevance

    return max(Draft202012Validator(schema).iter_errors(instance), key=relevance, default=None)


def _alternatives(branch: dict[str, Any], schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The schemas a value may match, nested oneOf / anyOf flattened, references resolved."""
    reference = branch.get("$ref")
    if reference:
        return [schema["$defs"][reference.rsplit("/", 1)[1]]]
    nested = branch.get("oneOf") or branch.get("anyOf")
    if nested:
        return [leaf for inner in nested for leaf in _alternatives(inner, schema)]
    return [branch]


JSON_TYPES = {"array": list, "object": dict, "string": str}


def _typed_as(branch: dict[str, Any], instance: Any) -> bool:
    kind = JSON_TYPES.get(branch.get("type", ""))
    return kind is not None and isinstance(instance, kind)


def _tag_values(branch: dict[str, Any]) -> Iterable[Any]:
    tag = branch.get("properties", {}).get(TAG, {})
    if "const" in tag:
        return [tag["const"]]
    return list(tag.get("enum", []))
