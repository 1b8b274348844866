"""What every plugin and every config section builds on; imports nothing of the project.

* ``Section``: the pydantic base of config sections and plugin config models (unknown keys are errors,
  assignments are re-validated), with ``renamed_keys`` for keys that changed their name;
* ``ConfigError``: a configuration problem phrased as one line;
* ``Registry``: name -> plugin, with its help line and its config model (``fedsim.config`` composes the
  discriminated unions of ``client.defenses[]``, ``adversary.attacks[]``, ... from them);
* ``check_device``: the device strings a config accepts.

Plugins (defenses, attacks, regularizers, strategies, DP modes, partitions, models, data sets) import this
module, never ``fedsim.config``: the config imports them.
"""

from __future__ import annotations

import copy
import difflib
import importlib
import logging
import pkgutil
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, model_validator

T = TypeVar("T")

logger = logging.getLogger("fedsim")


class TrainingFailed(RuntimeError):
    """A run played its rounds but none of them updated the global model (its rows are all kept)."""


class ConfigError(ValueError):
    """A configuration problem, already phrased as one line for the user."""


def check_device(value: str) -> str:
    """``value`` if it names a device a config may ask for, else a ValueError listing the allowed forms."""
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", value):
        raise ValueError(f"'{value}' is not a device; allowed: auto, cpu, cuda, cuda:N")
    return value


# ------------------------------------------------------------------------------------------- renames


@dataclass(frozen=True)
class Renamed:
    """A key that was renamed or folded into another: still accepted, with one deprecation line.

    ``move(raw, model)`` rewrites a raw mapping that holds ``old`` (in place) into the current shape and
    returns the replacement as the user should now write it (e.g. ``regularizers: [{name: tv, weight: 0.03}]``);
    None moves the value to the key ``new`` unchanged. A ``null`` value is dropped silently: it meant "the
    default" (configs written by older versions dump every unset option as null).
    """

    old: str
    new: str
    move: Callable[[dict[str, Any], type[BaseModel]], str] | None = None

    def apply(self, raw: dict[str, Any], model: type[BaseModel]) -> str | None:
        """Rewrite ``raw``; the replacement to name in the deprecation line, or None when nothing is to say."""
        value = raw.get(self.old)
        if value is None:
            raw.pop(self.old, None)
            return None
        if self.move is not None:
            return self.move(raw, model)
        if self.new in raw:
            raise ValueError(f"{self.old} = {value!r} and {self.new} = {raw[self.new]!r}: {self.old} is the old name of "
                             f"{self.new}; keep only {self.new}")  # fmt: skip
        raw[self.new] = raw.pop(self.old)
        return f"{self.new}: {yaml_flow(value)}"


def yaml_flow(value: Any) -> str:
    """``value`` in YAML flow style, as a user would write it in a config: ``[{name: tv, weight: 0.03}]``."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {yaml_flow(item)}" for key, item in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_flow(item) for item in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)



_said: set[str] = set()


def deprecation(message: str) -> None:
    """Log ``message`` once per process (a sweep validates its base config once per point)."""
    if message not in _said:
        _said.add(message)
        logger.warning(message)


def upgrade_keys(model: type[BaseModel], raw: dict[str, Any], where: str) -> dict[str, Any]:
    """A copy of ``raw`` with ``model``'s renamed keys in their current shape; logs one line per old key.

    ``where`` names the mapping in the message (``adversary.attacks[0]``); a mapping without old keys is
    returned as it is.
    """
    renamed: tuple[Renamed, ...] = getattr(model, "renamed_keys", ())
    if not any(rename.old in raw for rename in renamed):
        return raw
    raw = copy.deepcopy(raw)
    for rename in renamed:
        if rename.old in raw:
            replacement = rename.apply(raw, model)
            if replacement is not None:
                deprecation(f"{where}.{rename.old} is deprecated; use {replacement}")
    return raw


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, assignments are re-validated."""

    # No config number means anything as .inf or .nan (a learning rate, a noise scale, a timeout that never
    # ends): refused everywhere, with the key named, before anything runs.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False, allow_inf_nan=False)

    #: keys this section accepted under another name before (see ``Renamed``)
    renamed_keys: ClassVar[tuple[Renamed, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        # A config file is upgraded before validation (fedsim.config names the full key path); this catches
        # sections built in Python, e.g. AttackOptions(name="ig", tv_weight=0.01).
        if isinstance(data, dict) and cls.renamed_keys:
            tag = data.get("name")
            return upgrade_keys(cls, data, tag if isinstance(tag, str) else cls.__name__)
        return data


# ------------------------------------------------------------------------------------------ registry


class Registry(Generic[T]):
    """Maps names to plugins, each with a help line and (optionally) its config model.

    Unknown names fail with the list of what is allowed and the closest name.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._help: dict[str, str] = {}
        self._configs: dict[str, type[BaseModel]] = {}

    def register(self, name: str, help: str = "", config: type[BaseModel] | None = None) -> Callable[[T], T]:
        """Decorator registering ``obj`` under ``name``; ``config`` is the pydantic model of its options."""

        def decorator(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._entries[name] = obj
            doc_lines = (getattr(obj, "__doc__", None) or "").strip().splitlines()
            self._help[name] = help or (doc_lines[0] if doc_lines else "")
            if config is not None:
                self._configs[name] = config
            return obj

        return decorator

    def unregister(self, name: str) -> None:
        """Forget ``name`` (tests that register a plugin of their own clean up with it)."""
        self.get(name)
        del self._entries[name], self._help[name]
        self._configs.pop(name, None)

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(self.unknown_message(name)) from None

    def config(self, name: str) -> type[BaseModel] | None:
        """The config model ``name`` registered with (None: it takes no options of its own)."""
        self.get(name)
        return self._configs.get(name)

    def configs(self) -> dict[str, type[BaseModel]]:
        """name -> config model, for every entry that has one, in name order."""
        return {name: self._configs[name] for name in sorted(self._configs)}

    def unknown_message(self, name: str) -> str:
        allowed = ", ".join(sorted(self._entries)) or "none registered"
        close = difflib.get_close_matches(name, list(self._entries), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"unknown {self.kind} '{name}'{hint}; allowed: {allowed}"

    def describe(self) -> dict[str, str]:
        return {name: self._help[name] for name in sorted(self._entries)}

    def tag_of(self, name: str) -> str:
        """The entry that ``name`` selects (a registry of families maps ``tv:vgg16`` to ``tv``)."""
        return name

    def label(self, name: str) -> str:
        """How entry ``name`` is shown to users (`fedsim list`, the config reference)."""
        return name

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def names(self) -> list[str]:
        return sorted(self._entries)


class PluginSection(Section):
    """A section whose keys depend on the plugin it names (``model.name``, ``data.dataset``).

    The base class names the registry (``plugins``) and the naming key (``tag_key``); each plugin registers a
    subclass with its own keys. On the base class, ``Base(**keys)`` and ``Base.model_validate(keys)`` build the
    subclass of the plugin that ``keys[tag_key]`` names (the key's default when absent).
    """

    plugins: ClassVar[Registry[Any]]
    tag_key: ClassVar[str] = "name"

    @classmethod
    def _plugin_model(cls, data: Any) -> type[BaseModel]:
        if "plugins" not in cls.__dict__ or not isinstance(data, dict):
            return cls
        value = data.get(cls.tag_key, cls.model_fields[cls.tag_key].default)
        tag = cls.plugins.tag_of(value) if isinstance(value, str) else None
        if tag not in cls.plugins:
            raise ValueError(f"{cls.tag_key} = {value!r}: {cls.plugins.unknown_message(str(value))}")
        return cls.plugins.config(tag) or cls

    def __new__(cls, *args: Any, **data: Any) -> Any:
        return super().__new__(cls._plugin_model(data))

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Any:
        """As pydantic's; on the base class, the model of the plugin that ``obj`` names validates."""
        variant = cls._plugin_model(obj)
        if variant is not cls:
            return variant.model_validate(obj, *args, **kwargs)
        return super().model_validate(obj, *args, **kwargs)


def import_submodules(package: str, path: Iterable[str]) -> None:
    """Import every module of ``package`` (its ``__path__``), in name order: plugins register themselves on import,
    so adding one is adding its file."""
    for module in sorted(pkgutil.iter_modules(path), key=lambda info: info.name):
        importlib.import_module(f"{package}.{module.name}")
