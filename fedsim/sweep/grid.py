"""A sweep's grid: axes from ``--grid key=v1,v2`` or a ``sweep:`` section, expanded and validated up front.

Every axis is a config key (the ``--set`` syntax, list indexes included: ``client.defenses.0.sigma``) and
its values, each with a label that names the run directory. The cartesian product of the axes is the
list of points; each point is the base config with its values set, validated like any config, before
a single run starts, so that a typo in the last value does not surface an hour into the sweep.
"""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, field_validator

from fedsim.config import ConfigError, ExperimentConfig, Section, parse_config, parse_value, set_key

GRID_FLAG = "--grid"
#: keys the sweep sets itself (each run goes to SWEEP_DIR/<point>); a grid over them would scatter the runs
RESERVED_PREFIXES = ("output.dir", "output.run_name")
_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9.-]+")
MAX_NAME = 96


class SweepSpec(Section):
    """The ``sweep:`` section of a config: the grid to run (``fedsim config-schema`` documents runs, not this)."""

    grid: dict[str, list[Any] | dict[str, Any]] = Field(
        ...,
        description="config key -> its values: a list, or a mapping label -> value (labels name the run directories)",
    )

    @field_validator("grid")
    @classmethod
    def _non_empty(cls, grid: dict[str, Any]) -> dict[str, Any]:
        if not grid:
            raise ValueError("grid = {}: give at least one key and its values")
        for key, values in grid.items():
            if not values:
                raise ValueError(f"grid.{key} = {values!r}: give at least one value")
        return grid


@dataclass(frozen=True)
class Axis:
    """One swept key and its (label, value) pairs, in order."""

    key: str
    values: tuple[tuple[str, Any], ...]

    def as_mapping(self) -> dict[str, Any]:
        return dict(self.values)


@dataclass(frozen=True)
class SweepPoint:
    """One run of the sweep: its directory name, what it sets, and its validated config."""

    name: str
    overrides: dict[str, Any]
    labels: dict[str, str]
    config: ExperimentConfig


def split_top_level(text: str, separator: str = ",") -> list[str]:
    """Split on ``separator`` outside brackets, braces and quotes: ``[],[{name: prune, ratio: 0.9}]`` is two values."""
    parts: list[str] = []
    current: list[str] = []
    depth, quote = 0, ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == separator and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts]


def parse_grid_arg(assignment: str) -> Axis:
    """``key=v1,v2,...`` (each value read as YAML, as in ``--set``) -> an Axis labelled by the values' text."""
    if "=" not in assignment:
        raise ConfigError(f"{GRID_FLAG} {assignment!r}: expected KEY.PATH=V1,V2,..., e.g. client.lr=0.01,0.1")
    key, text = (part.strip() for part in assignment.split("=", 1))
    texts = split_top_level(text)
    if not key or any(not value for value in texts):
        raise ConfigError(f"{GRID_FLAG} {assignment!r}: empty key or value; expected KEY.PATH=V1,V2,...")
    return Axis(key, _unique_labels([(_label(value), parse_value(value)) for value in texts]))


def axes_from_spec(spec: SweepSpec) -> list[Axis]:
    """The ``sweep.grid`` mapping as axes: lists are labelled by their values, mappings by their keys."""
    axes = []
    for key, values in spec.grid.items():
        pairs = (
            [(_label(str(label)), value) for label, value in values.items()]
            if isinstance(values, dict)
            else [(_label(_value_text(value)), value) for value in values]
        )
        axes.append(Axis(key, _unique_labels(pairs)))
    return axes


def parse_spec(raw: Any, source: str) -> SweepSpec:
    """Validate a ``sweep:`` section into a SweepSpec (ConfigError in one line)."""
    from pydantic import ValidationError

    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: sweep must be a mapping with a `grid`, got {type(raw).__name__}")
    try:
        return SweepSpec.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{source}: sweep.{where}: {message}") from None


def merge_axes(config_axes: list[Axis], cli_axes: list[Axis]) -> list[Axis]:
    """The config's axes, then the command line's; a ``--grid`` key replaces every config axis it overlaps.

    Keys overlap when equal or when one lies inside the other (``client.defenses.0.sigma`` inside
    ``client.defenses``), so that ``--grid client.defenses.0.sigma=...`` sweeps the ``--set`` defense instead
    of fighting the config's own grid over ``client.defenses``.
    """

    def overlap(a: str, b: str) -> bool:
        return a == b or a.startswith(b + ".") or b.startswith(a + ".")

    kept = [axis for axis in config_axes if not any(overlap(axis.key, cli.key) for cli in cli_axes)]
    merged: dict[str, Axis] = {}
    for axis in kept + cli_axes:
        merged.pop(axis.key, None)
        merged[axis.key] = axis
    return list(merged.values())


def expand(base: dict[str, Any], axes: list[Axis], sweep_dir: Path) -> list[SweepPoint]:
    """Every point of the grid as a validated config under ``sweep_dir``; the first bad key or value raises.

    When the base config is valid on its own, each (key, value) is first checked alone against it, so that
    the error names the value at fault; then every combination is checked, as some constraints span keys
    (e.g. a failure's client against the number of clients) and a base may need the grid to be complete
    (``--set client.defenses.0.name=noise --grid client.defenses.0.sigma=0.1,1``).
    """
    if not axes:
        raise ConfigError(f"sweep: no grid; give {GRID_FLAG} KEY=V1,V2 or a `sweep: {{grid: ...}}` section")
    for axis in axes:
        if axis.key.startswith(RESERVED_PREFIXES):
            raise ConfigError(
                f"{GRID_FLAG} {axis.key}: the sweep places every run itself (SWEEP_DIR/<point>); not sweepable"
            )
    if _is_valid(base):
        for axis in axes:
            for _, value in axis.values:
                _validated(base, {axis.key: value}, f"{GRID_FLAG} {axis.key}={_value_text(value)}")
    shorts = _short_keys([axis.key for axis in axes])
    width = max(2, len(str(_count(axes) - 1)))
    points = []
    for index, combination in enumerate(itertools.product(*(axis.values for axis in axes))):
        labels = {axis.key: label for axis, (label, _) in zip(axes, combination)}
        overrides = {axis.key: value for axis, (_, value) in zip(axes, combination)}
        name = f"{index:0{width}d}-" + "_".join(f"{shorts[key]}-{label}" for key, label in labels.items())
        name = name[:MAX_NAME].rstrip("-_.")
        where = ", ".join(f"{key}={_value_text(value)}" for key, value in overrides.items())
        config = _validated(
            base, {**overrides, "output.dir": str(sweep_dir), "output.run_name": name}, f"grid point {where}"
        )
        points.append(SweepPoint(name, overrides, labels, config))
    return points


def _validated(base: dict[str, Any], overrides: dict[str, Any], where: str) -> ExperimentConfig:
    raw = copy.deepcopy(base)
    try:
        for key, value in overrides.items():
            set_key(raw, key, copy.deepcopy(value), GRID_FLAG)
        return parse_config(raw)
    except ConfigError as error:
        message = str(error)
        raise ConfigError(message if message.startswith(GRID_FLAG) else f"{where}: {message}") from None


def _is_valid(raw: dict[str, Any]) -> bool:
    try:
        parse_config(copy.deepcopy(raw))
    except ConfigError:
        return False
    return True


def _count(axes: list[Axis]) -> int:
    total = 1
    for axis in axes:
        total *= len(axis.values)
    return total


def _short_keys(keys: list[str]) -> dict[str, str]:
    """Each key's last non-index segment (``client.defenses.0.sigma`` -> ``sigma``); the full key where two clash."""
    short = {key: next(p for p in reversed(key.split(".")) if not p.isdigit()) for key in keys}
    clashes = {s for s in short.values() if list(short.values()).count(s) > 1}
    return {key: (_label(key) if s in clashes else s) for key, s in short.items()}


def _value_text(value: Any) -> str:
    """A value as the user would type it (YAML flow style): ``null``, ``true``, ``[{name: prune, ratio: 0.9}]``."""
    if isinstance(value, str):
        return value
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).removesuffix("\n...\n").strip()


def _label(text: str) -> str:
    """A directory-safe label: ``0.01`` -> ``0.01``, ``-1`` -> ``-1``, ``[]`` / ``null`` -> ``none``."""
    label = _LABEL_UNSAFE.sub("-", text).rstrip("-")
    if not re.match(r"-\d", label):
        label = label.lstrip("-")
    return "none" if label in ("", "null") else label


def _unique_labels(pairs: list[tuple[str, Any]]) -> tuple[tuple[str, Any], ...]:
    seen: set[str] = set()
    unique = []
    for i, (label, value) in enumerate(pairs):
        if label in seen:
            label = f"{label}-{i}"
        seen.add(label)
        unique.append((label, value))
    return tuple(unique)
