"""The config reference: every key of every section and registered plugin, with type, default and meaning.

``schema_rows()`` is what ``fedsim config-schema`` prints (``client.defenses[gradient_dropout].p``,
``adversary.attacks[ig].regularizers[tv].weight``, a row per renamed key saying what replaced it);
``plugin_schema(selector)`` one plugin or section; ``schema_markdown`` the docs' tables
(``docs/reference/config.md``).
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import PurePath
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from fedsim.config.compose import PLUGIN_SECTIONS, first_model, tagged_fields
from fedsim.config.experiment import ExperimentConfig
from fedsim.core.errors import ConfigError

Row = tuple[str, str, str, str]


def schema_rows(model: type[BaseModel] | None = None, prefix: str = "") -> list[Row]:
    """(key path, type, default, description) for every field, nested sections flattened.

    Every registered plugin gets its own rows: ``client.defenses[gradient_dropout].p``,
    ``adversary.attacks[ig].regularizers[tv].weight``, ``data.partition[dirichlet].alpha``; a renamed key gets
    a row saying what replaced it.
    """
    model = model or ExperimentConfig
    rows: list[Row] = []
    tagged = tagged_fields()
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        if name in tagged:
            registry = tagged[name]
            is_list = get_origin(field.annotation) is list
            choices = f"{field.description or ''} (one of: {', '.join(registry.label(tag) for tag in registry)})"
            helps = registry.describe()
            shared = PLUGIN_SECTIONS.get(name)
            if shared is not None:  # data, model: the keys every variant has, then each variant's own
                rows.append((path, "section", "", choices))
                rows.extend(schema_rows(shared, f"{path}."))
                for tag in registry:
                    variant = registry.config(tag) or shared
                    own = [
                        row
                        for row in plugin_rows(variant, f"{path}[{tag}]", helps[tag])
                        if re.split(r"[.\[]", row[0].removeprefix(f"{path}[{tag}]."))[0] not in shared.model_fields
                    ]
                    rows.extend(own)
                continue
            default = _default_text(field.default_factory() if field.default_factory is not None else field.default)
            kind = f"list of {registry.kind}" if is_list else registry.kind
            rows.append((path, kind, default, choices))
            for tag, variant in registry.configs().items():
                rows.extend(plugin_rows(variant, f"{path}[{tag}]", helps[tag]))
            continue
        nested = first_model(field.annotation)
        if nested is not None:
            is_list = get_origin(field.annotation) is list
            default = "[]" if is_list else ""
            rows.append((path, "list" if is_list else "section", default, field.description or ""))
            rows.extend(schema_rows(nested, f"{path}[]." if is_list else f"{path}."))
            continue
        default = field.default_factory() if field.default_factory is not None else field.default
        rows.append((path, _type_name(field.annotation), _default_text(default), field.description or ""))
    return rows


def plugin_rows(variant: type[BaseModel], path: str, help_text: str = "") -> list[Row]:
    """The rows of one plugin's config model at ``path`` (e.g. ``client.defenses[noise]``)."""
    name_field = variant.model_fields.get("name")
    described = help_text or (name_field.description if name_field else None) or variant.__doc__ or path
    rows: list[Row] = [(path, "plugin", "", described)]
    rows.extend(row for row in schema_rows(variant, f"{path}.") if row[0] != f"{path}.name")
    for renamed in getattr(variant, "renamed_keys", ()):
        rows.append((f"{path}.{renamed.old}", "deprecated", "", f"renamed: use {renamed.new}"))
    return rows


def plugin_schema(selector: str) -> list[Row]:
    """The rows of one plugin: ``client.defenses.gradient_dropout`` or ``client.defenses[gradient_dropout]``."""
    match = re.fullmatch(r"(.+?)(?:\[(\w[\w+-]*)\]|\.([\w+-]+))", selector.strip())
    rows = schema_rows()
    if match is not None:
        where, tag = match.group(1), match.group(2) or match.group(3)
        wanted = f"{where}[{tag}]"
        if any(row[0] == wanted for row in rows):
            return [
                row
                for row in rows
                if row[0] == wanted or row[0].startswith(wanted + ".") or row[0].startswith(wanted + "[")
            ]
    keys = sorted({row[0] for row in rows if row[1] == "plugin" and row[0].count("[") == 1})
    close = difflib.get_close_matches(selector, keys, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    if any(row[0] == selector or row[0].startswith(selector + ".") for row in rows):
        return [
            row
            for row in rows
            if row[0] == selector or row[0].startswith(selector + ".") or row[0].startswith(selector + "[")
        ]
    raise ConfigError(f"config-schema {selector}: no such plugin or section{hint}; plugins: {', '.join(keys)}")


def schema_markdown(rows: list[Row] | None = None) -> str:
    """The rows as Markdown tables, one per section or plugin (the docs' config reference)."""
    rows = schema_rows() if rows is None else rows
    lines: list[str] = []
    table: list[Row] = []

    def flush() -> None:
        if table:
            lines.extend(["| key | type | default | meaning |", "|---|---|---|---|"])
            lines.extend(
                f"| `{key}` | {_md(kind)} | {_md(default, code=True)} | {_md(text)} |"
                for key, kind, default, text in table
            )
            lines.append("")
            table.clear()

    for row in rows:
        if row[1] in ("section", "plugin") or (row[1] == "list" and not row[0].endswith("]")):
            flush()
            lines.append(f"**`{row[0]}`**" + (f" — {row[3]}" if row[3] else ""))
            lines.append("")
            continue
        table.append(row)
    flush()
    return "\n".join(lines).rstrip() + "\n"


def _md(text: str, code: bool = False) -> str:
    text = text.replace("|", "\\|")
    return f"`{text}`" if code and text else text


def _default_text(value: Any) -> str:
    if value is PydanticUndefined:
        return "(required)"

    def plain(item: Any) -> Any:
        return item.model_dump(mode="json") if isinstance(item, BaseModel) else str(item)

    return json.dumps(value.model_dump(mode="json") if isinstance(value, BaseModel) else value, default=plain)


def _type_name(annotation: Any) -> str:
    """A short, YAML-minded name: `int | null`, `one of a, b`, `list of str`."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin in (Union, UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is list:
        return f"list of {_type_name(args[0])}" if args else "list"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, PurePath):
        return "path"
    return getattr(annotation, "__name__", str(annotation))


#: the config's JSON Schema, shipped beside this module so that a command checks ``--set`` before torch loads
JSON_SCHEMA_FILE = PurePath(__file__).with_name("experiment.schema.json")


def json_schema() -> dict[str, Any]:
    """The JSON Schema of ``ExperimentConfig`` with every registered plugin, lenient where validation is: a key
    renamed since (``Section.renamed_keys``) and the flat ``model`` / ``data`` keys of config schema 2 are allowed,
    for the full validation to upgrade or refuse."""
    from pydantic.json_schema import GenerateJsonSchema

    from fedsim.config.migrate import FLAT_SECTION_DEFAULTS, SCHEMA_KEY

    class Lenient(GenerateJsonSchema):
        def model_schema(self, schema: Any) -> Any:
            generated = super().model_schema(schema)
            old = [rename.old for rename in getattr(schema["cls"], "renamed_keys", ())]
            if old and isinstance(generated.get("properties"), dict):
                generated["properties"].update({key: {} for key in old if key not in generated["properties"]})
            return generated

    schema = ExperimentConfig.model_json_schema(schema_generator=Lenient)
    schema["properties"][SCHEMA_KEY] = {"type": "integer"}
    for section, keys in FLAT_SECTION_DEFAULTS.items():
        for branch in schema["properties"][section].get("oneOf", []):
            properties = schema["$defs"][branch["$ref"].rsplit("/", 1)[1]]["properties"]
            properties.update({key: {} for key in keys if key not in properties})
    _plugin_names_allowed(schema, schema["$defs"])
    # a union fedsim picks by a key (a model's name, a data set's) may fit several variants: one suffices
    return json.loads(json.dumps(schema).replace('"oneOf"', '"anyOf"'))


def _plugin_names_allowed(node: Any, definitions: dict[str, Any]) -> None:
    """Where a plugin's config is expected, its name alone is allowed too (``defenses: [soteria]``, ``attacks:
    strongest``, ``partition: iid``: the shorthands the sections expand before validation)."""
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
    for child in list(children):
        _plugin_names_allowed(child, definitions)
    if not isinstance(node, dict):
        return
    for key in ("items", *(node.get("properties") or {})):
        target = node.get("items") if key == "items" else node["properties"][key]
        if isinstance(target, dict) and key != "items" and _is_plugin_union(target.get("items") or {}, definitions):
            node["properties"][key] = {"anyOf": [{"type": "string"}, target]}  # `attacks: strongest`
        elif isinstance(target, dict) and "oneOf" in target and _is_plugin_union(target, definitions):
            widened = {"anyOf": [{"type": "string"}, {"oneOf": target["oneOf"]}]}
            if "description" in target:
                widened["description"] = target["description"]
            if key == "items":
                node["items"] = widened
            else:
                node["properties"][key] = widened


def _is_plugin_union(node: dict[str, Any], definitions: dict[str, Any]) -> bool:
    widened = [member for member in node.get("anyOf", []) if "oneOf" in member]
    node = widened[0] if widened else node
    branches = [definitions.get(b.get("$ref", "").rsplit("/", 1)[-1], {}) for b in node.get("oneOf", [])]
    return bool(branches) and all("name" in branch.get("properties", {}) for branch in branches)


def json_schema_text() -> str:
    """What ``experiment.schema.json`` holds (``python -m fedsim.config.schema`` writes it)."""
    return json.dumps(json_schema(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    from pathlib import Path

    Path(JSON_SCHEMA_FILE).write_text(json_schema_text())
    print(f"wrote {JSON_SCHEMA_FILE}")
