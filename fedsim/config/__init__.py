"""Typed, validated experiment configuration.

A config is YAML with fixed top-level sections (``name``, ``seed``, ``device``, ``data``, ``model``,
``federation``, ``client``, ``strategy``, ``adversary``, ``output``). Every field has a default and a
one-line description (``fedsim config-schema`` prints them, see ``fedsim.config.schema``). Validation errors
are turned into one line naming the key path, the offending value and what is allowed.

The plugins (defenses, attacks and their regularizers, strategies, DP modes, partition schemes, models,
data sets) declare their own config models beside their code and register them; this package loads them
(``plugins``) and composes the discriminated unions of ``client.defenses[]``, ``adversary.attacks[]``,
``data.partition``, ... from the registries (``compose``). Plugins never import this package.

One module a job: a module per section (``federation``, ``client``, ``strategy``, ``adversary``, ``output``) and
``experiment`` (the root, with the checks that span sections), ``compose`` (plugin unions, the only place that
retypes fields), ``errors`` (one-line messages), ``migrate`` (older configs), ``overrides`` (``--set``),
``files`` (reading, validating and writing configs), ``schema`` (the config reference).
"""

from __future__ import annotations

from adversary.inversion.options import AttackOptions
from fedsim.config.adversary import AdversaryConfig
from fedsim.config.client import ClientConfig

# compose, imported before files, migrate and the schema: it loads the plugins and puts their unions into the sections
from fedsim.config.compose import refresh_plugins, tagged_fields
from fedsim.config.experiment import ExperimentConfig
from fedsim.config.federation import FederationConfig
from fedsim.config.files import (
    SWEEP_SECTION,
    config_changes,
    dump_config,
    load_config,
    parse_config,
    read_yaml,
    with_absolute_paths,
)
from fedsim.config.migrate import SCHEMA_VERSION, upgrade
from fedsim.config.output import OutputConfig
from fedsim.config.strategy import StrategyConfig
from fedsim.core.errors import ConfigError
from fedsim.core.overrides import apply_override, parse_value, set_key
from fedsim.core.sections import Section
from fedsim.data.sources import DataConfig
from fedsim.models import ModelConfig
from strategies.dp import DpConfig
from strategies.secagg import SECAGG_MODULUS, SECAGG_STAGES, SECAGG_STRATEGY, SECAGG_TRAINING_STAGE, SecAggConfig

__all__ = [
    "SCHEMA_VERSION",
    "SECAGG_MODULUS",
    "SECAGG_STAGES",
    "SECAGG_STRATEGY",
    "SECAGG_TRAINING_STAGE",
    "SWEEP_SECTION",
    "AdversaryConfig",
    "AttackOptions",
    "ClientConfig",
    "ConfigError",
    "DataConfig",
    "DpConfig",
    "ExperimentConfig",
    "FederationConfig",
    "ModelConfig",
    "OutputConfig",
    "SecAggConfig",
    "Section",
    "StrategyConfig",
    "apply_override",
    "config_changes",
    "dump_config",
    "load_config",
    "parse_config",
    "parse_value",
    "read_yaml",
    "refresh_plugins",
    "set_key",
    "tagged_fields",
    "upgrade",
    "with_absolute_paths",
]
