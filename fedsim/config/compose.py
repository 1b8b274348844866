"""Composing the config from the plugin registries: the only place that retypes config fields.

Each field that holds a plugin's config is declared with the base of its config models (see the section
modules of ``fedsim.config``, ``DataConfig.partition``, ``OptimizationOptions.regularizers``); ``_compose`` puts
the discriminated union of every registered plugin there, innermost first, and rebuilds the models. It runs
when this module is imported (after ``load_plugins``, so entry-point plugins are in), and again on
``refresh_plugins`` for plugins registered since.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional, Union, get_args, get_origin

from pydantic import BaseModel, Discriminator, Field, Tag

from adversary.inversion.options import OptimizationOptions
from adversary.inversion.regularizers import REGULARIZERS
from adversary.modifications import MODIFICATIONS
from adversary.registry import ATTACKS
from clients.defenses.registry import DEFENSES
from fedsim.config.adversary import AdversaryConfig
from fedsim.config.client import ClientConfig
from fedsim.config.experiment import ExperimentConfig
from fedsim.config.plugins import load_plugins
from fedsim.core.registry import Registry
from fedsim.core.sections import PluginSection
from fedsim.data.registry import DATASETS, PARTITIONS
from fedsim.data.sources import DataConfig
from fedsim.models import MODELS, ModelConfig


def tagged_fields() -> dict[str, Registry[Any]]:
    """Fields that hold a discriminated union -> the registry of its variants. Pydantic puts the tag into
    error locations; it is not a key the user wrote."""
    return {
        "partition": PARTITIONS,
        "defenses": DEFENSES,
        "attacks": ATTACKS,
        "regularizers": REGULARIZERS,
        "data": DATASETS,
        "model": MODELS,
    }


#: tagged fields whose variants extend a shared section (their naming key: data.dataset, model.name)
PLUGIN_SECTIONS: dict[str, type[PluginSection]] = {"data": DataConfig, "model": ModelConfig}


def _union(registry: Registry[Any]) -> Any:
    """The discriminated union (on ``name``) of every config model ``registry`` holds."""
    variants = tuple(registry.configs().values())
    union = Union[variants]  # noqa: UP007  (over a tuple built at run time: `|` cannot spell it)
    return Annotated[union, Field(discriminator="name")] if len(variants) > 1 else variants[0]


def _tagged_union(registry: Registry[Any], base: type[PluginSection]) -> Any:
    """The union of the config models of ``registry``'s entries (``base`` for those without one), chosen by the
    entry that ``base.tag_key`` names (``registry.tag_of``: ``tv:vgg16`` chooses ``tv``)."""
    key, default = base.tag_key, base.model_fields[base.tag_key].default

    def tag(value: Any) -> str:
        named = value.get(key, default) if isinstance(value, dict) else getattr(value, key, default)
        return registry.tag_of(named) if isinstance(named, str) else str(named)

    variants = tuple(Annotated[registry.config(name) or base, Tag(name)] for name in registry)
    union = Union[variants]  # type: ignore[valid-type]  # noqa: UP007  (over a tuple built at run time)
    return Annotated[union, Discriminator(tag)]


def variant_of(field: str, item: Any) -> type[BaseModel] | None:
    """The config model that the mapping ``item`` of tagged ``field`` names (None when it names none)."""
    registry, base = tagged_fields()[field], PLUGIN_SECTIONS.get(field)
    key = base.tag_key if base is not None else "name"
    named = (
        item.get(key, base.model_fields[key].default if base is not None else None) if isinstance(item, dict) else None
    )
    if not isinstance(named, str) or registry.tag_of(named) not in registry:
        return None
    return registry.config(registry.tag_of(named)) or base


def first_model(annotation: Any) -> Any:
    """The first pydantic model inside a field's annotation (``list[X]``, ``X | None``), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = first_model(arg)
        if found is not None:
            return found
    return None


def refresh_plugins() -> None:
    """Load plugins registered since this module was imported (entry points) and recompose the unions."""
    load_plugins()
    _compose()


def _compose() -> None:
    """Put the union of every registered plugin into the fields that hold one, innermost first."""
    regularizer = _union(REGULARIZERS)
    for attack in {OptimizationOptions, *ATTACKS.configs().values()}:
        _retype(attack, "regularizers", list[regularizer])  # type: ignore[valid-type]
    partition = _union(PARTITIONS)
    for data in {DataConfig, *DATASETS.configs().values()}:
        _retype(data, "partition", partition)
    _retype(ClientConfig, "defenses", list[_union(DEFENSES)])  # type: ignore[misc]
    _retype(AdversaryConfig, "attacks", list[_union(ATTACKS)])  # type: ignore[misc]
    # Optional[...] as written before: the config reference prints the annotation
    _retype(AdversaryConfig, "modification", Optional[_union(MODIFICATIONS)])  # type: ignore[misc]  # noqa: UP045
    _retype(ExperimentConfig, "data", _tagged_union(DATASETS, DataConfig))
    _retype(ExperimentConfig, "model", _tagged_union(MODELS, ModelConfig))


def _retype(model: type[BaseModel], field: str, annotation: Any) -> None:
    if field not in model.model_fields:
        return
    info = model.model_fields[field]
    if get_origin(annotation) is Annotated:  # a field keeps Annotated's metadata apart from its type
        annotation, *metadata = get_args(annotation)
        info.metadata = [item for item in info.metadata if not isinstance(item, Discriminator)] + metadata
    info.annotation = annotation
    model.model_rebuild(force=True)


load_plugins()  # entry-point plugins join the registries before the unions are composed
_compose()
