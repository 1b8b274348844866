"""Typed, validated experiment configuration: the sections, and the checks that span sections.

A config is YAML with fixed top-level sections (``name``, ``seed``, ``device``, ``data``, ``model``,
``federation``, ``client``, ``strategy``, ``adversary``, ``output``). Every field has a default and a
one-line description (``fedsim config-schema`` prints them, see ``fedsim.config.schema``). Validation errors are turned into one
line naming the key path, the offending value and what is allowed.

The plugins (defenses, attacks and their regularizers, strategies, DP modes, partition schemes, models,
data sets) declare their own config models beside their code and register them; this module loads them
(``fedsim.config.plugins``) and composes the discriminated unions of ``client.defenses[]``,
``adversary.attacks[]`` and ``data.partition`` from the registries. Plugins never import this module.
"""

from __future__ import annotations

import difflib
import logging
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, Discriminator, Field, Tag, ValidationError, field_validator, model_validator

from adversary.inversion.options import AttackOptions, OptimizationOptions
from adversary.inversion.regularizers import REGULARIZERS
from adversary.modifications import MODIFICATIONS
from adversary.registry import ATTACKS
from clients.defenses.registry import DEFENSES
from fedsim.core.errors import ConfigError
from fedsim.core.registry import Registry
from fedsim.core.sections import PluginSection, Section, check_device, upgrade_keys
from fedsim.data.sources import DATASETS, DataConfig
from fedsim.data.partition import PARTITIONS
from fedsim.models import MODELS, ModelConfig
from fedsim.config.plugins import load_plugins
from strategies.dp import DpConfig
from strategies.registry import STRATEGIES
from strategies.secagg import (
    SECAGG_MODULUS,
    SECAGG_STAGES,
    SECAGG_STRATEGY,
    SECAGG_TRAINING_STAGE,
    SecAggConfig,
)

__all__ = [
    "SECAGG_MODULUS", "SECAGG_STAGES", "SECAGG_STRATEGY", "SECAGG_TRAINING_STAGE", "SWEEP_SECTION", "SCHEMA_VERSION",
    "AdversaryConfig", "AttackOptions", "ClientConfig", "ConfigError", "DataConfig", "DpConfig", "ExperimentConfig",
    "FederationConfig", "ModelConfig", "OutputConfig", "SecAggConfig", "Section", "StrategyConfig",
    "apply_override", "dump_config", "load_config", "parse_config", "parse_value", "read_yaml", "refresh_plugins",
    "set_key", "tagged_fields", "upgrade",
]  # fmt: skip

#: version of the config and metrics-row layout a run writes (``schema_version`` in config.yaml, ``schema``
#: in metrics rows); files without one were written before versions existed (version 1)
SCHEMA_VERSION = 3  # 3: each model and data set declares its own keys
SCHEMA_KEY = "schema_version"

load_plugins()


def _union(registry: Registry[Any]) -> Any:
    """The discriminated union (on ``name``) of every config model ``registry`` holds."""
    variants = tuple(registry.configs().values())
    return Annotated[Union[variants], Field(discriminator="name")] if len(variants) > 1 else variants[0]


def _tagged_union(registry: Registry[Any], base: type[PluginSection]) -> Any:
    """The union of the config models of ``registry``'s entries (``base`` for those without one), chosen by the
    entry that ``base.tag_key`` names (``registry.tag_of``: ``tv:vgg16`` chooses ``tv``)."""
    key, default = base.tag_key, base.model_fields[base.tag_key].default

    def tag(value: Any) -> str:
        named = value.get(key, default) if isinstance(value, dict) else getattr(value, key, default)
        return registry.tag_of(named) if isinstance(named, str) else str(named)

    variants = tuple(Annotated[registry.config(name) or base, Tag(name)] for name in registry)
    return Annotated[Union[variants], Discriminator(tag)]  # type: ignore[valid-type]


def _variant(field: str, item: Any) -> type[BaseModel] | None:
    """The config model that the mapping ``item`` of tagged ``field`` names (None when it names none)."""
    registry, base = tagged_fields()[field], _PLUGIN_SECTIONS.get(field)
    key = base.tag_key if base is not None else "name"
    named = item.get(key, base.model_fields[key].default if base is not None else None) if isinstance(item, dict) else None
    if not isinstance(named, str) or registry.tag_of(named) not in registry:
        return None
    return registry.config(registry.tag_of(named)) or base


# ------------------------------------------------------------------------------------- data, model

# `data` and `model` name their plugin (data.dataset, model.name); each data set and model declares its keys
# beside its code (fedsim.data.sources, fedsim.models) and registers them.
Partition = _union(PARTITIONS)
Data = _tagged_union(DATASETS, DataConfig)
Model = _tagged_union(MODELS, ModelConfig)

#: Keys of the one flat ``model`` and ``data`` sections of config schema 2 and older, which every model and
#: data set accepted, with the value they had when unset. Files of those schemas (old runs dump every key;
#: hand-written configs carry no version) are read without such a key where the chosen model or data set
#: lacks it and it holds that value or null: it meant "nothing set". Any other value is still an error.
FLAT_SECTION_DEFAULTS: dict[str, dict[str, Any]] = {
    "model": {"activation": None, "norm": "batch", "width": None, "dropout": 0.0, "pretrained": False},
    "data": {"path": None, "root": "~/.cache/fedsim/data", "download": True},
}


# --------------------------------------------------------------------------------------- federation


class ClientResources(Section):
    cpus: float = Field(1.0, gt=0, description="CPU cores reserved per simulated client")
    gpus: float = Field(0.0, ge=0, description="GPU share per simulated client (fractions allowed)")


class FailureInjection(Section):
    round: int = Field(..., ge=1, description="round in which the client fails")
    client: int = Field(..., ge=0, description="partition id of the failing client")
    kind: Literal["exception", "nan", "hang"] = Field(
        "exception",
        description="raise, produce a NaN training loss, or stop answering (the client sleeps past "
        "federation.round_timeout, holding its Ray worker that long)",
    )
    stage: Literal["setup", "share_keys", "collect_masked_vectors", "unmask"] | None = Field(
        None, description="secagg+ only: the protocol stage it fails in (null = collect_masked_vectors, where it trains)"
    )

    @model_validator(mode="after")
    def _nan_needs_training(self) -> "FailureInjection":
        if self.kind == "nan" and self.stage not in (None, SECAGG_TRAINING_STAGE):
            raise ValueError(
                f"stage = '{self.stage}': a nan loss comes from training, which happens in stage "
                f"'{SECAGG_TRAINING_STAGE}'; use kind exception or hang in other stages"
            )
        return self


class FederationConfig(Section):
    num_clients: int = Field(4, ge=1, le=10_000, description="number of simulated clients (partitions)")
    rounds: int = Field(3, ge=1, description="number of federated rounds")
    fraction_fit: float = Field(1.0, gt=0, le=1, description="share of clients sampled for training each round")
    min_fit_clients: int = Field(1, ge=1, description="successful replies a round needs to update the model")
    fraction_evaluate: float = Field(
        0.0, ge=0, le=1, description="share of clients that also evaluate the global model on their own data"
    )
    round_timeout: float = Field(3600.0, gt=0, description="seconds to wait for replies before a client counts as failed")
    client_resources: ClientResources = Field(default_factory=ClientResources, description="Ray resources per client")
    ray_address: str | None = Field(
        None,
        description="simulate on this running Ray cluster (`auto`: the one `ray start` started on this machine, or "
        "HOST:PORT of its head node); null: Ray's own RAY_ADDRESS if set, else a Ray instance of the run's own",
    )
    failures: list[FailureInjection] = Field(
        default_factory=list, description="failures to inject (dropout studies, robustness tests)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> "FederationConfig":
        if self.min_fit_clients > self.num_clients:
            raise ValueError(
                f"min_fit_clients = {self.min_fit_clients}: must be <= num_clients ({self.num_clients})"
            )
        for failure in self.failures:
            if failure.client >= self.num_clients:
                raise ValueError(f"failures.client = {failure.client}: must be < num_clients ({self.num_clients})")
            if failure.round > self.rounds:
                raise ValueError(f"failures.round = {failure.round}: must be <= rounds ({self.rounds})")
        return self


# ------------------------------------------------------------------------------------------- client


# Defenses: one model per mechanism, discriminated by `name`, each declared and registered beside its
# implementation in clients/defenses. Training-level defenses change how the client trains; update-level
# ones transform what it sends, in the order listed.
Defense = _union(DEFENSES)


def _training_defenses() -> list[str]:
    return [name for name in DEFENSES if DEFENSES.get(name).kind == "training"]


class ClientConfig(Section):
    optimizer: Literal["sgd", "adam"] = Field("sgd", description="local optimizer")
    lr: float = Field(0.1, gt=0, description="local learning rate")
    momentum: float = Field(0.0, ge=0, lt=1, description="SGD momentum")
    weight_decay: float = Field(0.0, ge=0, description="L2 weight decay")
    batch_size: int = Field(32, ge=1, description="local mini-batch size")
    local_steps: int | None = Field(None, ge=1, description="local optimizer steps per round (exclusive with local_epochs)")
    local_epochs: int | None = Field(None, ge=1, description="local epochs per round (default 1 when local_steps is unset)")
    defenses: list[Defense] = Field(
        default_factory=list, description="defenses applied by every client, in order (see `fedsim list`)"
    )
    verify_model: bool = Field(
        False,
        description="refuse a model from the server whose architecture differs from the agreed one (`model`): the "
        "client fails that round instead of training it (stops a malicious server's modification)",
    )

    @field_validator("defenses", mode="before")
    @classmethod
    def _defense_shorthand(cls, value: Any) -> Any:
        # `defenses: [soteria]` is shorthand for `defenses: [{name: soteria}]`
        return [{"name": item} if isinstance(item, str) else item for item in value] if isinstance(value, list) else value

    @field_validator("defenses")
    @classmethod
    def _training_defenses_once(cls, value: list[Any]) -> list[Any]:
        training = _training_defenses()
        for name in training:
            if sum(defense.name == name for defense in value) > 1:
                raise ValueError(f"'{name}' is listed twice; a client trains with it at most once")
        listed = [name for name in training if name in {defense.name for defense in value}]
        if len(listed) > 1:
            raise ValueError(f"{' and '.join(repr(name) for name in listed)} both change the local training; "
                             "list only one of them")  # fmt: skip
        return value

    @model_validator(mode="after")
    def _steps_or_epochs(self) -> "ClientConfig":
        if self.local_steps is not None and self.local_epochs is not None:
            raise ValueError(
                f"local_steps = {self.local_steps} and local_epochs = {self.local_epochs}: set only one of them "
                "(the other to null)"
            )
        if self.local_steps is None and self.local_epochs is None:
            self.__dict__["local_epochs"] = 1
        return self

    @property
    def dp_compatible_model(self) -> bool:
        """Whether the model is built with Opacus' layer replacements (dpsgd with fix_model: true), everywhere."""
        return any(defense.builds_dp_compatible_model for defense in self.defenses)


# ----------------------------------------------------------------------------------------- strategy


class StrategyConfig(Section):
    name: str = Field("fedavg", description="server strategy (see `fedsim list`)")
    dp: DpConfig | None = Field(
        None, description="central differential privacy (Flower's DP wrappers) around the strategy; null = off"
    )
    secagg: SecAggConfig | None = Field(
        None, description=f"SecAgg+ parameters (strategy.name = {SECAGG_STRATEGY} only; null there = the defaults)"
    )

    @field_validator("name")
    @classmethod
    def _known_strategy(cls, value: str) -> str:
        if value not in STRATEGIES:
            raise ValueError(STRATEGIES.unknown_message(value))
        return value

    @model_validator(mode="after")
    def _secagg_parameters(self) -> "StrategyConfig":
        if self.name == SECAGG_STRATEGY:
            if self.secagg is None:
                self.__dict__["secagg"] = SecAggConfig()
            if self.dp is not None:
                raise ValueError(
                    f"dp = {{kind: {self.dp.kind}, ...}}: Flower's central-DP wrappers wrap Message-API strategies; "
                    f"{SECAGG_STRATEGY} runs on Flower's legacy path; set strategy.dp to null"
                )
        elif self.secagg is not None:
            raise ValueError(
                f"secagg = {self.secagg.model_dump(exclude_unset=True)}: SecAgg+ parameters need strategy.name = {SECAGG_STRATEGY} "
                f"(name is '{self.name}')"
            )
        return self


# ---------------------------------------------------------------------------------------- adversary


# Attacks: one options model per attack, discriminated by `name`, each declared and registered beside
# the attack in adversary/attacks (``AttackOptions(name=...)`` builds the one of that name).
Attack = _union(ATTACKS)
# A malicious server's model modification (adversary/modifications), discriminated by `name`.
Modification = _union(MODIFICATIONS)


class AdversaryKnowledge(Section):
    local_training: bool = Field(True, description="the victims' lr, local steps and batch size are known")
    num_samples: bool = Field(True, description="the number of samples behind each update is known")
    labels: Literal["inferred", "known"] = Field("inferred", description="labels are recovered, or granted")
    bn_statistics: bool = Field(False, description="BatchNorm statistics of the victims' batches may be used")


RoundSpec = Union[Literal["all"], list[int], str]


class AttackWorkerResources(Section):
    cpus: float = Field(1.0, gt=0, description="CPU cores per attack worker (its torch threads), kept from the clients")
    gpus: float = Field(0.0, ge=0, description="GPU share per attack worker on a CUDA device (fractions allowed)")


class AdversaryConfig(Section):
    tap: Literal["mitm", "server"] = Field(
        "mitm", description="`mitm`: each reply on the wire; `server`: what the strategy sees (only the sum under SecAgg+)"
    )
    targets: Literal["per-client", "aggregate", "both"] = Field("per-client", description="what gets inverted")
    server: Literal["honest", "malicious"] = Field(
        "honest",
        description="`malicious`: in the attacked rounds the server sends adversary.modification instead of the "
        "global model and uses the replies only for the attack (those rounds do not train); needs tap: server",
    )
    modification: Modification | None = Field(  # type: ignore[valid-type]
        None, description="what a malicious server sends, e.g. {name: imprint, bins: 128} (null = imprint's defaults)"
    )
    rounds: RoundSpec = Field("all", description="rounds to attack: `all`, a list [1, 3], or an interval `2-5`")
    clients: Literal["all"] | list[int] = Field("all", description="victims attacked per client: `all` or a list")
    knows: AdversaryKnowledge = Field(default_factory=AdversaryKnowledge, description="the threat model's knowledge")
    attacks: list[Attack] = Field(
        default_factory=list,
        description="attacks to run (empty = no adversary), or `strongest`: every registered attack whose requirements "
        "hold for the run's model, defenses and threat model, adaptive ones where their defense is in force",
    )
    portfolio_options: dict[str, Any] = Field(
        default_factory=dict,
        description="with `attacks: strongest`: options given to every attack of the portfolio that has them, "
        "e.g. {iterations: 300, restarts: 2, time_limit: 120}",
    )
    portfolio_exclude: list[str] = Field(
        default_factory=list, description="with `attacks: strongest`: attacks left out of the portfolio (e.g. [ggssr])"
    )
    portfolio: Literal["listed", "strongest"] = Field(
        "listed",
        description="`strongest` (set by `attacks: strongest`): attacks whose requirements fail are left out at the "
        "start of the run instead of refused",
    )
    device: str = Field("auto", description="where attacks run: `auto`, `cpu`, `cuda`, `cuda:N`")
    workers: int = Field(
        1, ge=1, description="attack worker processes running at once, beside the training (each holds adversary.resources)"
    )
    resources: AttackWorkerResources = Field(
        default_factory=AttackWorkerResources, description="what each attack worker process holds, as client_resources"
    )
    save_images: bool = Field(True, description="write original-over-reconstruction PNG grids per round and target")
    lpips: Literal["auto", "off", "required"] = Field(
        "auto",
        description="LPIPS (ImageNet AlexNet at $FEDSIM_LPIPS_WEIGHTS or the torch hub cache): auto = download where "
        "possible, else null with one warning; required = refuse to start without it; off = never",
    )

    @model_validator(mode="before")
    @classmethod
    def _strongest_portfolio(cls, data: Any) -> Any:
        # `attacks: strongest` lists every registered attack with its defaults; the run keeps those that apply
        if isinstance(data, dict) and data.get("attacks") == "strongest":
            shared = dict(data.get("portfolio_options") or {})
            excluded = list(data.get("portfolio_exclude") or [])
            unknown = [name for name in excluded if name not in ATTACKS]
            if unknown:
                raise ValueError(f"portfolio_exclude: {ATTACKS.unknown_message(str(unknown[0]))}")
            attacks = [
                {"name": name, **{key: value for key, value in shared.items() if key in ATTACKS.config(name).model_fields}}
                for name in ATTACKS.names()
                if name not in excluded
            ]
            unused = [key for key in shared if not any(key in entry for entry in attacks)]
            if unused:
                raise ValueError(f"portfolio_options.{unused[0]}: no attack of the portfolio has this option")
            data = {**data, "attacks": attacks, "portfolio": "strongest"}
        return data

    @field_validator("attacks", mode="before")
    @classmethod
    def _attack_shorthand(cls, value: Any) -> Any:
        # `attacks: [dlg, ig]` is shorthand for `attacks: [{name: dlg}, {name: ig}]`
        return [{"name": item} if isinstance(item, str) else item for item in value] if isinstance(value, list) else value

    @field_validator("rounds")
    @classmethod
    def _round_spec(cls, value: RoundSpec) -> RoundSpec:
        if isinstance(value, str) and value != "all" and not re.fullmatch(r"\d+-\d+", value):
            raise ValueError(f"'{value}' is not a round spec; allowed: all, a list like [1, 3], or an interval like 2-5")
        if isinstance(value, list) and any(r < 1 for r in value):
            raise ValueError(f"{value}: rounds start at 1")
        if isinstance(value, list) and not value:
            raise ValueError("selects no round; allowed: all, a list like [1, 3], or an interval like 2-5")
        if isinstance(value, str) and value != "all":
            first, last = (int(part) for part in value.split("-"))
            if first < 1 or last < first:
                raise ValueError("selects no round; an interval first-last needs 1 <= first <= last")
        return value

    @field_validator("clients")
    @classmethod
    def _client_list(cls, value: Literal["all"] | list[int]) -> Literal["all"] | list[int]:
        if isinstance(value, list) and (not value or any(client < 0 for client in value)):
            raise ValueError("selects no client; allowed: all, or partition ids 0 .. num_clients - 1")
        return value

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        return check_device(value)

    @model_validator(mode="after")
    def _malicious_server(self) -> "AdversaryConfig":
        if self.server == "malicious":
            if self.tap != "server":
                raise ValueError(f"server = malicious with tap = {self.tap}: the malicious server attacks what it "
                                 "receives; set tap: server")  # fmt: skip
            if self.modification is None:
                self.__dict__["modification"] = MODIFICATIONS.config("imprint")()
        elif self.modification is not None:
            raise ValueError(f"modification = {{name: {self.modification.name}, ...}}: only a malicious server "
                             "modifies the model; set server: malicious, or modification: null")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _attacks_have_targets(self) -> "AdversaryConfig":
        for index, attack in enumerate(self.attacks):
            if attack.inverts != "both" and self.targets not in ("both", attack.inverts):
                raise ValueError(
                    f"attacks.{index}.inverts = {attack.inverts}: this attack would never run, targets is '{self.targets}'; "
                    f"allowed: both or {self.targets}"
                )
        return self

    def attacks_round(self, server_round: int) -> bool:
        if not self.attacks:
            return False
        if self.rounds == "all":
            return True
        if isinstance(self.rounds, list):
            return server_round in self.rounds
        first, last = (int(part) for part in self.rounds.split("-"))
        return first <= server_round <= last

    def attacks_client(self, client: int) -> bool:
        return self.clients == "all" or client in self.clients


# ------------------------------------------------------------------------------------------- output


class OutputConfig(Section):
    dir: Path = Field(Path("runs"), description="parent folder of run directories")

    @field_validator("dir")
    @classmethod
    def _a_folder(cls, value: Path) -> Path:
        if value.exists() and not value.is_dir():
            raise ValueError("is a file, not a folder")
        return value
    run_name: str | None = Field(None, description="run directory name (null = <name>-<timestamp>)")
    save_checkpoints: bool = Field(True, description="keep every round's global model (the latest is always kept, for --resume)")
    ground_truth: bool = Field(True, description="record which samples each client trained on, per round")

    @field_validator("run_name")
    @classmethod
    def _safe_name(cls, value: str | None) -> str | None:
        return None if value is None else directory_name(value)


def directory_name(value: str) -> str:
    """``value`` if it names one folder inside ``output.dir`` (no separator, no ``..``), else a ValueError."""
    if not re.fullmatch(r"[A-Za-z0-9._-]+", value) or set(value) == {"."}:
        raise ValueError(f"'{value}' may only contain letters, digits, '.', '_' and '-' (and not be only dots)")
    return value


# -------------------------------------------------------------------------------------------- root


class ExperimentConfig(Section):
    name: str = Field("fedsim", min_length=1, description="experiment name, used in the run directory")
    # numpy's legacy generators (Flower's sampling, scikit-learn) take seeds below 2**32
    seed: int = Field(0, ge=0, lt=2**32, description="seed of data partitioning, model init, sampling and training")
    device: str = Field("auto", description="`auto` (cuda when available), `cpu`, `cuda` or `cuda:N`")
    data: Data = Field(default_factory=DataConfig, description="data set, size and partitioning")
    model: Model = Field(default_factory=ModelConfig, description="the federated model")
    federation: FederationConfig = Field(default_factory=FederationConfig, description="clients and rounds")
    client: ClientConfig = Field(default_factory=ClientConfig, description="local training on each client")
    strategy: StrategyConfig = Field(default_factory=StrategyConfig, description="server-side aggregation")
    adversary: AdversaryConfig = Field(default_factory=AdversaryConfig, description="attacks on the updates")
    output: OutputConfig = Field(default_factory=OutputConfig, description="where and what a run records")

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        return check_device(value)

    @field_validator("name")
    @classmethod
    def _name_is_one_folder(cls, value: str) -> str:
        return directory_name(value)  # the run directory is <output.dir>/<name>-<timestamp>

    @model_validator(mode="after")
    def _adversary_selects_what_exists(self) -> "ExperimentConfig":
        adversary, federation = self.adversary, self.federation
        if not adversary.attacks:
            return self
        if adversary.knows.local_training and self.client.optimizer != "sgd":
            raise ValueError(
                f"client.optimizer = '{self.client.optimizer}': an attacker that knows the local training simulates "
                "SGD (with momentum and weight decay) only; use sgd, or set adversary.knows.local_training: false "
                "(the update's direction is matched then)"
            )
        if isinstance(adversary.clients, list) and adversary.targets != "aggregate":
            missing = [client for client in adversary.clients if client >= federation.num_clients]
            if missing:
                raise ValueError(
                    f"adversary.clients = {adversary.clients}: no client {missing[0]}; partition ids run 0 .. "
                    f"{federation.num_clients - 1} (federation.num_clients = {federation.num_clients})"
                )
        if not any(adversary.attacks_round(r) for r in range(1, federation.rounds + 1)):
            raise ValueError(
                f"adversary.rounds = {adversary.rounds!r}: selects no round of 1 .. {federation.rounds} "
                f"(federation.rounds = {federation.rounds})"
            )
        return self

    @model_validator(mode="after")
    def _dp_fits_federation(self) -> "ExperimentConfig":
        if self.strategy.dp is not None:
            self.strategy.dp.check_federation(self.federation)
        return self

    @model_validator(mode="after")
    def _secagg_fits_federation(self) -> "ExperimentConfig":
        secagg = self.strategy.secagg
        if secagg is None:
            for index, failure in enumerate(self.federation.failures):
                if failure.stage is not None:
                    raise ValueError(
                        f"federation.failures[{index}].stage = '{failure.stage}': protocol stages exist only under "
                        f"strategy.name = {SECAGG_STRATEGY}; remove it (the client fails in training)"
                    )
            return self
        secagg.check_federation(self.federation)
        if self.federation.fraction_evaluate > 0:
            raise ValueError(
                f"federation.fraction_evaluate = {self.federation.fraction_evaluate}: client-side evaluation is not "
                f"wired for {SECAGG_STRATEGY} (the global model is evaluated on the test set every round); set it to 0"
            )
        return self


# ------------------------------------------------------------------------------------------ loading


def tagged_fields() -> dict[str, Registry[Any]]:
    """Fields that hold a discriminated union -> the registry of its variants. Pydantic puts the tag into
    error locations; it is not a key the user wrote."""
    return {"partition": PARTITIONS, "defenses": DEFENSES, "attacks": ATTACKS, "regularizers": REGULARIZERS,
            "data": DATASETS, "model": MODELS}  # fmt: skip


#: tagged fields whose variants extend a shared section (their naming key: data.dataset, model.name)
_PLUGIN_SECTIONS: dict[str, type[PluginSection]] = {"data": DataConfig, "model": ModelConfig}


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
            current = tagged[field].config(item) or _PLUGIN_SECTIONS.get(field)
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


def first_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = first_model(arg)
        if found is not None:
            return found
    return None


def _named(raw: Any, loc: tuple[Any, ...], tag: str) -> str:
    """The name the user wrote for the tagged variant at ``loc`` (``tv:resnet18`` where the tag is ``tv``)."""
    node, field, tagged = raw, None, tagged_fields()
    for item in loc:
        if field in tagged and item in tagged[field]:
            base = _PLUGIN_SECTIONS.get(field)
            named = node.get(base.tag_key if base else "name") if isinstance(node, dict) else None
            return named if isinstance(named, str) else tag
        if isinstance(node, dict) and item in node:
            node, field = node[item], item
        elif isinstance(node, list) and isinstance(item, int) and item < len(node):
            node = node[item]
        else:
            return tag
    return tag


def _one_line(error: ValidationError, root: type[BaseModel] | None = None, raw: Any = None) -> str:
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
        base = _PLUGIN_SECTIONS.get(field)
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


def upgrade(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with every renamed key in its current shape (one deprecation line each, naming the key path).

    Walks the sections as the models nest them, choosing each tagged variant by its ``name``; what cannot
    be walked (wrong types, unknown names) is left for validation to report.
    """
    version = raw.get(SCHEMA_KEY)
    if version is not None and (not isinstance(version, int) or version > SCHEMA_VERSION):
        raise ConfigError(f"{SCHEMA_KEY} = {version!r}: this fedsim reads versions up to {SCHEMA_VERSION}; "
                          "upgrade fedsim to read it")  # fmt: skip
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
        variant = _variant(section, item) if isinstance(item, dict) else None
        if variant is None:
            continue
        out[section] = {
            key: value for key, value in item.items()
            if key in variant.model_fields or key not in defaults or value not in (None, defaults[key])
        }  # fmt: skip
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
                _upgrade(tagged[name].config(item["name"]), item, f"{where}[{index}]")
                if isinstance(item, dict) and item.get("name") in tagged[name] and tagged[name].config(item["name"])
                else item
                for index, item in enumerate(raw[name])
            ]
        elif name in tagged and isinstance(raw[name], dict):
            variant = _variant(name, raw[name])
            if variant is not None:
                out[name] = _upgrade(variant, raw[name], where)
        else:
            nested = first_model(info.annotation)
            if nested is not None and isinstance(raw[name], dict):
                out[name] = _upgrade(nested, raw[name], where)
            elif nested is not None and isinstance(raw[name], list):
                out[name] = [_upgrade(nested, item, f"{where}[{i}]") if isinstance(item, dict) else item
                             for i, item in enumerate(raw[name])]  # fmt: skip
    return out


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
        raise ConfigError(_one_line(error, raw=upgraded)) from None


def apply_override(raw: dict[str, Any], assignment: str) -> None:
    """Apply one ``key.path=value`` override in place; the value is parsed as YAML."""
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment!r}: expected KEY.PATH=VALUE, e.g. client.lr=0.05")
    key, text = assignment.split("=", 1)
    if not [p for p in key.strip().split(".") if p]:
        raise ConfigError(f"--set {assignment!r}: empty key")
    set_key(raw, key, parse_value(text))


def parse_value(text: str) -> Any:
    """A command-line value, read as YAML (``0.1``, ``[1, 2]``, ``{name: prune}``); unparsable text stays text."""
    try:
        return yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        return text


def set_key(raw: dict[str, Any], key: str, value: Any, flag: str = "--set") -> None:
    """Set ``key.path`` (list indexes as numbers, e.g. ``client.defenses.0.sigma``) in a raw config, in place.

    Missing sections are created, so that an unknown key reaches validation and gets its one-line error;
    ``flag`` names the option the key came from in error messages.
    """
    parts = [p for p in key.strip().split(".") if p]
    node: Any = raw
    for i, part in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        if isinstance(node, list):
            node = _list_slot(node, part, key, flag)
            continue
        if not isinstance(node, dict):
            raise ConfigError(f"{flag} {key}: '{parts[i - 1]}' is a value ({node!r}), not a section")
        if part not in node or node[part] is None or isinstance(node[part], str):
            # a string here is a shorthand (e.g. `partition: iid`) that the override expands
            node[part] = [] if nxt.isdigit() else ({"name": node[part]} if isinstance(node.get(part), str) else {})
        node = node[part]
    last = parts[-1]
    if isinstance(node, list):
        index = int(last) if last.isdigit() else None
        if index is None or index > len(node):
            raise ConfigError(f"{flag} {key}: '{last}' is not a valid index into a list of {len(node)}")
        if index == len(node):
            node.append(value)
        else:
            node[index] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ConfigError(f"{flag} {key}: '{parts[-2]}' is a value ({node!r}), not a section")


def _list_slot(node: list[Any], part: str, key: str, flag: str = "--set") -> Any:
    if not part.isdigit() or int(part) > len(node):
        raise ConfigError(f"{flag} {key}: '{part}' is not a valid index into a list of {len(node)}")
    if int(part) == len(node):
        node.append({})
    if isinstance(node[int(part)], str):  # a shorthand entry (`attacks: [ig]`) that the override expands
        node[int(part)] = {"name": node[int(part)]}
    return node[int(part)]


SWEEP_SECTION = "sweep"  # top-level key of a sweep config's grid (fedsim.sweep); never part of a run's config


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file '{path}' does not exist")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"config file '{path}' is not valid YAML{where}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file '{path}' must hold a mapping of sections, got {type(raw).__name__}")
    if expanded_size(raw) > MAX_CONFIG_VALUES:
        raise ConfigError(
            f"config file '{path}' expands to more than {MAX_CONFIG_VALUES:,} values (YAML aliases nested in "
            "aliases?); write the config out"
        )
    return raw


MAX_CONFIG_VALUES = 100_000


def expanded_size(value: Any) -> int:
    """How many values ``value`` holds once every YAML alias is expanded. The loaded object is a DAG (an
    alias is the same Python object), so this is counted per object, never by walking the expansion."""
    sizes: dict[int, int] = {}

    def size(item: Any) -> int:
        if id(item) in sizes:
            return sizes[id(item)]
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        total = 1 + sum(size(child) for child in children)
        sizes[id(item)] = total
        return total

    return size(value)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read YAML (or start from defaults), apply ``--set`` overrides and validate.

    A ``sweep:`` section (the grid ``fedsim sweep`` runs) is not part of a run's config: it is dropped here,
    with a warning, so that ``fedsim run`` on a sweep config runs its base point.
    """
    raw = read_yaml(path) if path is not None else {}
    if raw.pop(SWEEP_SECTION, None) is not None:
        logging.getLogger("fedsim").warning(
            "%s has a %s: section; this runs its base config only (`fedsim sweep %s` runs the grid)",
            path, SWEEP_SECTION, path,
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


def refresh_plugins() -> None:
    """Load plugins registered since this module was imported (entry points) and recompose the unions."""
    load_plugins()
    _compose()


def _compose() -> None:
    """Put the union of every registered plugin into the fields that hold one, innermost first."""
    global Partition, Defense, Attack, Data, Model
    regularizer = _union(REGULARIZERS)
    for attack in {OptimizationOptions, *ATTACKS.configs().values()}:
        _retype(attack, "regularizers", list[regularizer])  # type: ignore[valid-type]
    Partition = _union(PARTITIONS)
    for data in {DataConfig, *DATASETS.configs().values()}:
        _retype(data, "partition", Partition)
    Defense, Attack = _union(DEFENSES), _union(ATTACKS)
    Data, Model = _tagged_union(DATASETS, DataConfig), _tagged_union(MODELS, ModelConfig)
    _retype(ClientConfig, "defenses", list[Defense])  # type: ignore[valid-type]
    _retype(AdversaryConfig, "attacks", list[Attack])  # type: ignore[valid-type]
    _retype(AdversaryConfig, "modification", Optional[_union(MODIFICATIONS)])  # type: ignore[misc]
    _retype(ExperimentConfig, "data", Data)
    _retype(ExperimentConfig, "model", Model)


def _retype(model: type[BaseModel], field: str, annotation: Any) -> None:
    if field not in model.model_fields:
        return
    info = model.model_fields[field]
    if get_origin(annotation) is Annotated:  # a field keeps Annotated's metadata apart from its type
        annotation, *metadata = get_args(annotation)
        info.metadata = [item for item in info.metadata if not isinstance(item, Discriminator)] + metadata
    info.annotation = annotation
    model.model_rebuild(force=True)


_compose()  # plugins loaded at import (entry points) joined the registries after their sections were built
