"""What every plugin config model and every config section builds on; imports nothing of the project.

* ``Section``: the pydantic base of config sections and plugin config models (unknown keys are errors,
  assignments are re-validated), with ``renamed_keys`` for keys that changed their name (``Renamed``);
* ``PluginSection``: a section whose keys depend on the plugin it names (``model.name``, ``data.dataset``, an
  attack's ``name``);
* ``check_device``: the device strings a config accepts.

Plugins (defenses, attacks, regularizers, strategies, DP modes, partitions, models, data sets) import this
module, never ``fedsim.config``: the config imports them.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator

from fedsim.core.registry import Registry

logger = logging.getLogger("fedsim")


def check_device(value: str) -> str:
    """Check a config's device setting.

    Parameters
    ----------
    value
        ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.

    Returns
    -------
    str
        ``value``, unchanged.

    Raises
    ------
    ValueError
        ``value`` names no device a config may ask for; the message lists the allowed forms.
    """
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", value):
        raise ValueError(f"'{value}' is not a device; allowed: auto, cpu, cuda, cuda:N")
    return value


@dataclass(frozen=True)
class Renamed:
    """A key that was renamed or folded into another: still accepted, with one deprecation line.

    A ``null`` value is dropped silently: it meant "the default" (configs written by older versions dump every
    unset option as null).

    Parameters
    ----------
    old
        The key as older configs spell it.
    new
        The key that replaces it.
    move
        ``move(raw, model)`` rewrites a raw mapping that holds ``old`` (in place) into the current shape and
        returns the replacement as the user should now write it (e.g. ``regularizers: [{name: tv, weight:
        0.03}]``); None moves the value to the key ``new`` unchanged.
    """

    old: str
    new: str
    move: Callable[[dict[str, Any], type[BaseModel]], str] | None = None

    def apply(self, raw: dict[str, Any], model: type[BaseModel]) -> str | None:
        """Rewrite ``raw`` (in place) into the current shape.

        Parameters
        ----------
        raw
            A mapping of ``model``'s keys that holds ``old``.
        model
            The config model the mapping validates into.

        Returns
        -------
        str or None
            The replacement to name in the deprecation line, or None when nothing is to say.

        Raises
        ------
        ValueError
            ``raw`` holds both ``old`` and ``new``.
        """
        value = raw.get(self.old)
        if value is None:
            raw.pop(self.old, None)
            return None
        if self.move is not None:
            return self.move(raw, model)
        if self.new in raw:
            raise ValueError(
                f"{self.old} = {value!r} and {self.new} = {raw[self.new]!r}: {self.old} is the old name of "
                f"{self.new}; keep only {self.new}"
            )
        raw[self.new] = raw.pop(self.old)
        return f"{self.new}: {yaml_flow(value)}"


def yaml_flow(value: Any) -> str:
    """A value in YAML flow style, as a user would write it in a config.

    Parameters
    ----------
    value
        Plain data: mappings, lists, scalars.

    Returns
    -------
    str
        E.g. ``[{name: tv, weight: 0.03}]``.
    """
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
    """Log a deprecation once per process (a sweep validates its base config once per point).

    Parameters
    ----------
    message
        The line to log (as a warning).
    """
    if message not in _said:
        _said.add(message)
        logger.warning(message)


def upgrade_keys(model: type[BaseModel], raw: dict[str, Any], where: str) -> dict[str, Any]:
    """A copy of ``raw`` with ``model``'s renamed keys in their current shape; logs one line per old key.

    Parameters
    ----------
    model
        The config model whose ``renamed_keys`` (``Renamed``) apply.
    raw
        A mapping of the model's keys, as a config file holds it.
    where
        The mapping's place in the config, named in the message (``adversary.attacks[0]``).

    Returns
    -------
    dict
        The upgraded copy; a mapping without old keys is returned as it is.
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


class PluginSection(Section):
    """A section whose keys depend on the plugin it names (``model.name``, ``data.dataset``).

    The base class names the registry (``plugins``) and the naming key (``tag_key``); each plugin registers a
    subclass with its own keys. On the base class, ``Base(**keys)`` and ``Base.model_validate(keys)`` build the
    subclass of the plugin that ``keys[tag_key]`` names (the key's default when absent; the base class itself
    when the key has no default, so that validation reports it missing). Used by ``model``, ``data`` and
    attack options (``AttackOptions(name="ig")``).
    """

    plugins: ClassVar[Registry[Any]]
    tag_key: ClassVar[str] = "name"

    @classmethod
    def _plugin_model(cls, data: Any) -> type[BaseModel]:
        if "plugins" not in cls.__dict__ or not isinstance(data, dict):
            return cls
        naming = cls.model_fields[cls.tag_key]
        if cls.tag_key not in data and naming.is_required():
            return cls  # validation reports the missing key
        value = data.get(cls.tag_key, naming.default)
        tag = cls.plugins.tag_of(value) if isinstance(value, str) else None
        if tag is None or tag not in cls.plugins:
            raise ValueError(f"{cls.tag_key} = {value!r}: {cls.plugins.unknown_message(str(value))}")
        return cls.plugins.config(tag) or cls

    def __new__(cls, *args: Any, **data: Any) -> Any:
        return super().__new__(cls._plugin_model(data))

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Any:
        """As pydantic's; on the base class, the model of the plugin that ``obj`` names validates.

        Parameters
        ----------
        obj
            The section's keys (or a model instance).
        *args, **kwargs
            Pydantic's ``model_validate`` options.

        Returns
        -------
        PluginSection
            An instance of the plugin's config model.
        """
        variant = cls._plugin_model(obj)
        if variant is not cls:
            return variant.model_validate(obj, *args, **kwargs)
        return super().model_validate(obj, *args, **kwargs)
