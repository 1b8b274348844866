"""Reading configs that older fedsim versions wrote: ``SCHEMA_VERSION``, and ``upgrade`` from any older one.

Renamed keys are rewritten into their current shape (``Renamed``, declared by the section that renamed them, one
deprecation line each, naming the key path; e.g. ``adversary.audit``, now ``adversary.privacy_audit``); configs
of schema 2 and older lose the flat ``model`` / ``data`` keys that meant "nothing set" for
the chosen model or data set (``FLAT_SECTION_DEFAULTS``). Run directories users already have keep reading.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from fedsim.config.compose import first_model, tagged_fields, variant_of
from fedsim.config.experiment import ExperimentConfig
from fedsim.core.errors import ConfigError
from fedsim.core.sections import upgrade_keys

#: version of the config and metrics-row layout a run writes (``schema_version`` in config.yaml, ``schema``
#: in metrics rows); files without one were written before versions existed (version 1)
SCHEMA_VERSION = 3  # 3: each model and data set declares its own keys
SCHEMA_KEY = "schema_version"

#: Keys of the one flat ``model`` and ``data`` sections of config schema 2 and older, which every model and
#: data set accepted, with the value they had when unset. Files of those schemas (old runs dump every key;
#: hand-written configs carry no version) are read without such a key where the chosen model or data set
#: lacks it and it holds that value or null: it meant "nothing set". Any other value is still an error.
FLAT_SECTION_DEFAULTS: dict[str, dict[str, Any]] = {
    "model": {"activation": None, "norm": "batch", "width": None, "dropout": 0.0, "pretrained": False},
    "data": {"path": None, "root": "~/.cache/fedsim/data", "download": True},
}


def upgrade(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with every renamed key in its current shape (one deprecation line each, naming the key path).

    Walks the sections as the models nest them, choosing each tagged variant by its ``name``; what cannot
    be walked (wrong types, unknown names) is left for validation to report.
    """
    version = raw.get(SCHEMA_KEY)
    if version is not None and (not isinstance(version, int) or version > SCHEMA_VERSION):
        raise ConfigError(
            f"{SCHEMA_KEY} = {version!r}: this fedsim reads versions up to {SCHEMA_VERSION}; upgrade fedsim to read it"
        )
    raw = {key: value for key, value in raw.items() if key != SCHEMA_KEY}
    if (version or 1) < 3:
        raw = _without_flat_defaults(raw)
    return _upgrade(ExperimentConfig, raw, "")


def _without_flat_defaults(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` without the flat-section keys that mean nothing for its model / data set and hold their old unset
    value (see ``FLAT_SECTION_DEFAULTS``)."""
    out = dict(raw)
    for section, defaults in FLAT_SECTION_DEFAULTS.items():
        item = raw.get(section)
        if not isinstance(item, dict):
            continue
        variant = variant_of(section, item)
        if variant is None:
            continue
        out[section] = {
            key: value
            for key, value in item.items()
            if key in variant.model_fields or key not in defaults or value not in (None, defaults[key])
        }
    return out


def _upgrade(model: type[BaseModel], raw: dict[str, Any], path: str) -> dict[str, Any]:
    try:
        raw = upgrade_keys(model, raw, path or "config")
    except ValueError as error:
        raise ConfigError(f"{path}: {error}" if path else str(error)) from None
    tagged = tagged_fields()
    out = dict(raw)
    for name, info in model.model_fields.items():
        if name not in raw:
            continue
        where = f"{path}.{name}" if path else name
        if name in tagged and isinstance(raw[name], list):
            out[name] = [
                _upgrade(variant, item, f"{where}[{index}]")
                if isinstance(item, dict)
                and item.get("name") in tagged[name]
                and (variant := tagged[name].config(item["name"]))
                else item
                for index, item in enumerate(raw[name])
            ]
        elif name in tagged and isinstance(raw[name], dict):
            variant = variant_of(name, raw[name])
            if variant is not None:
                out[name] = _upgrade(variant, raw[name], where)
        else:
            nested = first_model(info.annotation)
            if nested is not None and isinstance(raw[name], dict):
                out[name] = _upgrade(nested, raw[name], where)
            elif nested is not None and isinstance(raw[name], list):
                out[name] = [
                    _upgrade(nested, item, f"{where}[{i}]") if isinstance(item, dict) else item
                    for i, item in enumerate(raw[name])
                ]
    return out
