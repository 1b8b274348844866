"""Config files: reading YAML (with the guard against alias bombs), validating, writing and comparing them.

``load_config`` is what ``fedsim run`` does: read, apply ``--set`` overrides, upgrade older keys and
validate, every problem as one line (``ConfigError``). ``dump_config`` writes a run's config.yaml.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from fedsim.config.errors import one_line
from fedsim.config.experiment import ExperimentConfig
from fedsim.config.migrate import SCHEMA_KEY, SCHEMA_VERSION, upgrade
from fedsim.core.config_text import read_yaml
from fedsim.core.errors import ConfigError
from fedsim.core.overrides import apply_override

SWEEP_SECTION = "sweep"  # top-level key of a sweep config's grid (fedsim.sweep); never part of a run's config


def parse_config(raw: dict[str, Any]) -> ExperimentConfig:
    """Validate a plain dict into an ExperimentConfig, raising ConfigError with one line.

    Renamed keys of older configs are accepted (one deprecation line each); ``schema_version`` is checked
    and dropped (it describes the file, not the experiment).
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"config must be a mapping of sections, got {type(raw).__name__}")
    try:
        upgraded = upgrade(raw)
        return ExperimentConfig.model_validate(upgraded)
    except ValidationError as error:
        raise ConfigError(one_line(error, raw=upgraded)) from None


def load_config(
    path: str | Path | Mapping[str, Any] | ExperimentConfig | None = None, overrides: list[str] | None = None
) -> ExperimentConfig:
    """Read YAML (or start from defaults), apply ``--set`` overrides and validate.

    ``path``: a YAML file; or, from Python (``fedsim.run``), the config's sections as a mapping or an
    ``ExperimentConfig``, which are validated the same way (neither is changed).

    A ``sweep:`` section (the grid ``fedsim sweep`` runs) is not part of a run's config: it is dropped here,
    with a warning, so that ``fedsim run`` on a sweep config runs its base point.
    """
    if isinstance(path, ExperimentConfig):
        raw = path.model_dump(mode="json")  # what the run's config.yaml holds: read back to the same config
    elif isinstance(path, Mapping):
        raw = copy.deepcopy(dict(path))
    else:
        raw = read_yaml(path) if path is not None else {}
    if raw.pop(SWEEP_SECTION, None) is not None:
        named = isinstance(path, (str, Path))
        logging.getLogger("fedsim").warning(
            "%s has a %s: section; this runs its base config only (`fedsim sweep %s` runs the grid)",
            path if named else "the config",
            SWEEP_SECTION,
            path if named else "CONFIG",
        )
    for assignment in overrides or []:
        apply_override(raw, assignment)
    return parse_config(raw)


def with_absolute_paths(config: ExperimentConfig) -> ExperimentConfig:
    """A copy whose file and folder settings are absolute (resolved against the current directory, as they
    are read): a run records them so, and ``--resume`` from anywhere reads the same files."""
    copy = config.model_copy(deep=True)

    def resolve(model: BaseModel) -> None:
        for name in type(model).model_fields:
            value = getattr(model, name)
            if isinstance(value, Path) and not value.is_absolute():
                setattr(model, name, value.resolve())
            elif isinstance(value, BaseModel):
                resolve(value)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, BaseModel):
                        resolve(item)

    resolve(copy)
    return copy


def config_changes(before: str, after: str) -> list[str]:
    """Dotted keys whose values differ between two dumped configs (``dump_config``)."""

    def flat(value: Any, prefix: str = "") -> dict[str, Any]:
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for key, item in value.items():
                out |= flat(item, f"{prefix}{key}.")
            return out
        return {prefix.rstrip("."): value}

    old, new = flat(yaml.safe_load(before)), flat(yaml.safe_load(after))
    return sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))


def dump_config(config: ExperimentConfig) -> str:
    """The resolved config as YAML, headed by the schema version it is written in."""
    return yaml.safe_dump({SCHEMA_KEY: SCHEMA_VERSION, **config.model_dump(mode="json")}, sort_keys=False)
