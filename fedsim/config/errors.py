"""Pydantic's validation errors as one line: the key path as the user wrote it, the offending value, what is
allowed, and "did you mean" for a mistyped key.

The tag pydantic puts into an error's location for a discriminated union (``client.defenses.0.noise.sigma``)
is not a key the user wrote: it is left out (``client.defenses[0].sigma``), or named as the plugin the
mapping chose (``unknown key 'model.widht' for model 'tv:resnet18'``).
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from pydantic import BaseModel, ValidationError

from fedsim.config.compose import PLUGIN_SECTIONS, first_model, tagged_fields
from fedsim.config.experiment import ExperimentConfig


def _format_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    field = None
    tagged = tagged_fields()
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
            continue
        if field in tagged and item in tagged[field]:
            field = None
            continue
        parts.append(("." if parts else "") + str(item))
        field = item
    return "".join(parts)


def _walk(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[Any, tuple[str, str] | None]:
    """The model at ``loc`` (None when unknown), and (kind, tag) when the last step chose a tagged variant."""
    current: Any = model
    field = None
    chosen = None
    tagged = tagged_fields()
    for item in loc:
        if isinstance(item, int) or current is None:
            continue
        if field in tagged and item in tagged[field]:
            current = tagged[field].config(item) or PLUGIN_SECTIONS.get(field)
            field, chosen = None, (tagged[field].kind, item)
            continue
        info = current.model_fields.get(item) if hasattr(current, "model_fields") else None
        if info is None:
            return None, None
        current, field, chosen = first_model(info.annotation), item, None
    return current, chosen


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names allowed at the parent of ``loc`` (for "did you mean" hints)."""
    current, _ = _walk(model, loc[:-1])
    return list(current.model_fields) if current is not None and hasattr(current, "model_fields") else []


def _named(raw: Any, loc: tuple[Any, ...], tag: str) -> str:
    """The name the user wrote for the tagged variant at ``loc`` (``tv:resnet18`` where the tag is ``tv``)."""
    node, field, tagged = raw, None, tagged_fields()
    for item in loc:
        if field in tagged and item in tagged[field]:
            base = PLUGIN_SECTIONS.get(field)
            named = node.get(base.tag_key if base else "name") if isinstance(node, dict) else None
            return named if isinstance(named, str) else tag
        if isinstance(node, dict) and item in node:
            node, field = node[item], item
        elif isinstance(node, list) and isinstance(item, int) and item < len(node):
            node = node[item]
        else:
            return tag
    return tag


def one_line(error: ValidationError, root: type[BaseModel] | None = None, raw: Any = None) -> str:
    first = error.errors()[0]
    loc = tuple(first["loc"])
    path = _format_path(loc)
    value = first.get("input")
    if first["type"] == "extra_forbidden":
        allowed = _fields_at(root or ExperimentConfig, loc)
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        _, chosen = _walk(root or ExperimentConfig, loc[:-1])
        owner = f" for {chosen[0]} '{_named(raw, loc[:-1], chosen[1])}'" if chosen else ""
        return f"unknown key '{path}'{owner}{hint}; allowed here: {', '.join(allowed)}"
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "union_tag_invalid":
        field = next((item for item in reversed(loc) if isinstance(item, str)), "")
        registry = tagged_fields().get(field)
        base = PLUGIN_SECTIONS.get(field)
        key = base.tag_key if base is not None else "name"
        tag = first["ctx"].get("tag")
        if base is not None and isinstance(value, dict) and isinstance(value.get(key), str):
            tag = value[key]  # what the user wrote (tag_of maps foo:bar to foo)
        if registry is not None:
            return f"{path}.{key} = {tag!r}: {registry.unknown_message(str(tag))}"
        return f"{path}.{key} = {tag!r}: {message}"
    if isinstance(value, dict) and re.match(r"[\w.\[\]]+ = ", message):
        # a section-level check that already names its key, e.g. "path = null: ..."
        return f"{path}.{message}" if path else message
    if isinstance(value, dict) or first["type"] == "missing":
        return f"{path}: {message}"
    return f"{path} = {value!r}: {message}"
