"""Typed, validated experiment configuration.

A config is YAML with fixed top-level sections (``name``, ``seed``, ``device``, ``data``, ``model``,
``federation``, ``client``, ``strategy``, ``adversary``, ``output``). Every field has a default and a
one-line description (``fedsim config-schema`` prints them). Validation errors are turned into one
line naming the key path, the offending value and what is allowed.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
from pathlib import Path, PurePath
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticUndefined


class ConfigError(ValueError):
    """A configuration problem, already phrased as one line for the user."""


def _check_device(value: str) -> str:
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", value):
        raise ValueError(f"'{value}' is not a device; allowed: auto, cpu, cuda, cuda:N")
    return value


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, assignments are re-validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


# --------------------------------------------------------------------------------------------- data


class IidPartition(Section):
    name: Literal["iid"] = Field("iid", description="every client gets a uniformly random, equal share")


class DirichletPartition(Section):
    name: Literal["dirichlet"] = Field("dirichlet", description="label skew drawn from Dirichlet(alpha)")
    alpha: float = Field(0.5, gt=0, description="concentration; small alpha = strong label skew")
    min_partition_size: int = Field(1, ge=0, description="redraw until every client has this many samples")


class PathologicalPartition(Section):
    name: Literal["pathological"] = Field("pathological", description="each client holds only a few classes")
    classes_per_client: int = Field(2, ge=1, description="number of distinct classes per client")


PARTITIONS: dict[str, type[Section]] = {
    "iid": IidPartition,
    "dirichlet": DirichletPartition,
    "pathological": PathologicalPartition,
}

Partition = Annotated[
    Union[IidPartition, DirichletPartition, PathologicalPartition], Field(discriminator="name")
]


class DataConfig(Section):
    dataset: str = Field("digits", description="data set name (see `fedsim list`)")
    path: Path | None = Field(None, description="file or folder for `npz` and `imagefolder` data sets")
    root: Path = Field(
        Path("~/.cache/fedsim/data"), description="where torchvision data sets are (or get downloaded to)"
    )
    download: bool = Field(True, description="let torchvision data sets download when missing")
    image_size: int | None = Field(None, ge=4, le=1024, description="resize images to this side (null = native)")
    test_fraction: float = Field(
        0.2, gt=0, lt=1, description="held-out share for data sets that ship without a test split"
    )
    max_train_samples: int | None = Field(None, ge=1, description="use only the first N training samples")
    max_test_samples: int | None = Field(None, ge=1, description="evaluate on only the first N test samples")
    normalize: Literal["global", "client", "none"] = Field(
        "global",
        description="standardise inputs with channel mean/std of the whole training set, of each client's own data, or not",
    )
    partition: Partition = Field(default_factory=IidPartition, description="how samples are split across clients")

    @field_validator("partition", mode="before")
    @classmethod
    def _partition_shorthand(cls, value: Any) -> Any:
        # `partition: iid` is accepted as shorthand for `partition: {name: iid}`.
        return {"name": value} if isinstance(value, str) else value

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, value: str) -> str:
        from fedsim.data import DATASETS

        if value not in DATASETS:
            raise ValueError(DATASETS.unknown_message(value))
        return value

    @model_validator(mode="after")
    def _path_when_needed(self) -> "DataConfig":
        from fedsim.data.loaders import PATH_DATASETS

        if self.dataset in PATH_DATASETS:
            if self.path is None:
                raise ValueError(f"path = null: data set '{self.dataset}' reads its files from data.path; set it")
            if not self.path.expanduser().exists():
                raise ValueError(f"path = '{self.path}': no such file or folder")
        return self


# -------------------------------------------------------------------------------------------- model

Activation = Literal["relu", "sigmoid", "tanh", "leaky_relu", "gelu"]


class ModelConfig(Section):
    name: str = Field("lenet", description="model name (see `fedsim list`), or `tv:<torchvision classifier>`")
    activation: Activation | None = Field(None, description="hidden activation (null = the model's own default)")
    norm: Literal["batch", "group", "none"] = Field("batch", description="normalisation layers (resnet18, convnet)")
    width: int | None = Field(None, ge=1, description="channel/unit width multiplier base (null = model default)")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout before the classifier (0 = none)")
    init: Literal["default", "uniform"] = Field(
        "default", description="`uniform` = DLG's uniform(-0.5, 0.5) init of every weight and bias"
    )
    checkpoint: Path | None = Field(None, description="state_dict to start the federation from (weights_only load)")
    pretrained: bool = Field(False, description="torchvision weights from the local torch cache (tv:* models)")

    @field_validator("name")
    @classmethod
    def _known_model(cls, value: str) -> str:
        from fedsim.models import check_model_name

        check_model_name(value)
        return value


# --------------------------------------------------------------------------------------- federation


class ClientResources(Section):
    cpus: float = Field(1.0, gt=0, description="CPU cores reserved per simulated client")
    gpus: float = Field(0.0, ge=0, description="GPU share per simulated client (fractions allowed)")


# The stages of Flower's SecAgg+ protocol, in order (flwr.common.secure_aggregation.secaggplus_constants.Stage).
SECAGG_STAGES = ("setup", "share_keys", "collect_masked_vectors", "unmask")
SECAGG_TRAINING_STAGE = "collect_masked_vectors"  # the stage in which SecAgg+ clients train and send masked vectors


class InjectedFailure(Section):
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
    def _nan_needs_training(self) -> "InjectedFailure":
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
    failures: list[InjectedFailure] = Field(
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


# Defenses: one model per mechanism, discriminated by `name`; the implementations live in
# clients/defenses (registry DEFENSES). Training-level defenses change how the client trains;
# update-level ones transform what it sends, in the order listed.


class DpsgdDefense(Section):
    name: Literal["dpsgd"] = Field("dpsgd", description="DP-SGD (Opacus): per-sample clipping and Gaussian noise")
    max_grad_norm: float = Field(1.0, gt=0, description="per-sample gradient clipping bound C")
    noise_multiplier: float | None = Field(None, ge=0, description="noise std / C (exclusive with target_epsilon)")
    target_epsilon: float | None = Field(
        None, gt=0, description="epsilon to reach after all federation.rounds (assumes the client trains every round)"
    )
    delta: float | None = Field(None, gt=0, lt=1, description="delta (null = 1 / client data set size)")
    accountant: Literal["rdp", "prv"] = Field("rdp", description="Opacus privacy accountant")
    poisson_sampling: bool = Field(True, description="Poisson-sampled batches (what the accountant assumes)")
    fix_model: bool = Field(False, description="replace layers Opacus cannot handle (BatchNorm -> GroupNorm)")

    @model_validator(mode="after")
    def _one_noise_source(self) -> "DpsgdDefense":
        if (self.noise_multiplier is None) == (self.target_epsilon is None):
            raise ValueError(
                f"noise_multiplier = {self.noise_multiplier} and target_epsilon = {self.target_epsilon}: "
                "set exactly one of them"
            )
        return self


class PdpsgdDefense(Section):
    name: Literal["pdpsgd"] = Field("pdpsgd", description="PDP-SGD (paper 000, eq. 12): L + kappa sum theta^2 x^2")
    sigma: float = Field(0.1, gt=0, description="noise parameter; kappa = lr^2 sigma^2 (paper 000: 0.1)")
    kappa: float | None = Field(None, ge=0, description="regularisation constant; overrides sigma (null = lr^2 sigma^2)")


class NoiseDefense(Section):
    name: Literal["noise"] = Field("noise", description="additive noise on the update")
    sigma: float = Field(..., gt=0, description="noise scale (std for gaussian, b for laplace)")
    distribution: Literal["gaussian", "laplace"] = Field("gaussian", description="noise distribution")


class ClipDefense(Section):
    name: Literal["clip"] = Field("clip", description="clip the update's L2 norm")
    max_norm: float = Field(..., gt=0, description="largest L2 norm sent")
    scope: Literal["global", "per-tensor"] = Field("global", description="one norm over all tensors, or one each")


class PruneDefense(Section):
    name: Literal["prune"] = Field("prune", description="zero the smallest-magnitude update entries")
    ratio: float = Field(..., gt=0, lt=1, description="fraction of entries set to zero")
    scope: Literal["global", "per-tensor"] = Field("global", description="rank entries over all tensors, or per tensor")


class GradientDropoutDefense(Section):
    name: Literal["gradient_dropout"] = Field("gradient_dropout", description="paper 004, Algorithm 1")
    p: float = Field(..., gt=0, le=1, description="retention probability; kept entries are scaled by 1/p")
    sigma: float = Field(..., ge=0, description="std of the Gaussian noise replacing dropped entries")


class SoteriaDefense(Section):
    name: Literal["soteria"] = Field("soteria", description="Soteria (Sun et al. 2021): prune the representation layer")
    ratio: float = Field(0.8, gt=0, lt=1, description="fraction of representation units whose columns are zeroed")
    layer: str | None = Field(None, description="the Linear layer fed by the representation (null = the first one)")


DEFENSE_CONFIGS: dict[str, type[Section]] = {
    "dpsgd": DpsgdDefense,
    "pdpsgd": PdpsgdDefense,
    "noise": NoiseDefense,
    "clip": ClipDefense,
    "prune": PruneDefense,
    "gradient_dropout": GradientDropoutDefense,
    "soteria": SoteriaDefense,
}
TRAINING_DEFENSES = ("dpsgd", "pdpsgd")

Defense = Annotated[
    Union[
        DpsgdDefense, PdpsgdDefense, NoiseDefense, ClipDefense, PruneDefense, GradientDropoutDefense, SoteriaDefense
    ],
    Field(discriminator="name"),
]


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

    @field_validator("defenses", mode="before")
    @classmethod
    def _defense_shorthand(cls, value: Any) -> Any:
        # `defenses: [soteria]` is shorthand for `defenses: [{name: soteria}]`
        return [{"name": item} if isinstance(item, str) else item for item in value] if isinstance(value, list) else value

    @field_validator("defenses")
    @classmethod
    def _training_defenses_once(cls, value: list[Any]) -> list[Any]:
        for name in TRAINING_DEFENSES:
            if sum(defense.name == name for defense in value) > 1:
                raise ValueError(f"'{name}' is listed twice; a client trains with it at most once")
        if {"dpsgd", "pdpsgd"} <= {defense.name for defense in value}:
            raise ValueError("'dpsgd' and 'pdpsgd' both change the local training; list only one of them")
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
        return any(defense.name == "dpsgd" and defense.fix_model for defense in self.defenses)


# ----------------------------------------------------------------------------------------- strategy


_ADAPTIVE_ONLY = ("target_clipped_quantile", "clip_norm_lr", "clipped_count_stddev")


class DpConfig(Section):
    """Central DP by Flower's strategy wrappers: clip every client's update, add Gaussian noise to the aggregate."""

    kind: str = Field(
        "server-fixed",
        description="clipping: server-fixed, client-fixed, server-adaptive, client-adaptive (see `fedsim list`)",
    )
    noise_multiplier: float = Field(
        1.0, ge=0, description="noise std / clipping norm on the sum of updates (0 = clip only, epsilon infinite)"
    )
    clipping_norm: float = Field(1.0, gt=0, description="L2 bound on each client's update (adaptive: the initial bound)")
    num_sampled_clients: int | None = Field(
        None, ge=1, description="clients the noise is calibrated for (null = those FedAvg samples per round)"
    )
    target_clipped_quantile: float | None = Field(
        None, ge=0, le=1, description="(adaptive) share of updates the bound should clip (null = 0.5)"
    )
    clip_norm_lr: float | None = Field(None, gt=0, description="(adaptive) learning rate of the bound (null = 0.2)")
    clipped_count_stddev: float | None = Field(
        None, ge=0, description="(adaptive) noise std of the clipped count (null = num_sampled_clients / 20)"
    )
    delta: float | None = Field(None, gt=0, lt=1, description="delta of the reported epsilon (null = 1 / num_clients)")
    amplification: bool = Field(
        True,
        description="credit amplification by client sampling in epsilon (as Poisson, rate sampled/num_clients); "
        "false = each round a full Gaussian release",
    )

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        from strategies.dp import DP_MECHANISMS

        if value not in DP_MECHANISMS:
            raise ValueError(DP_MECHANISMS.unknown_message(value))
        return value

    @model_validator(mode="after")
    def _adaptive_options(self) -> "DpConfig":
        from strategies.dp import DP_MECHANISMS

        if not DP_MECHANISMS.get(self.kind).adaptive:
            for key in _ADAPTIVE_ONLY:
                if getattr(self, key) is not None:
                    raise ValueError(
                        f"{key} = {getattr(self, key)!r}: only adaptive kinds (server-adaptive, client-adaptive) "
                        f"use it; kind is '{self.kind}'"
                    )
        return self

    def sampled_clients(self, federation: "FederationConfig") -> int:
        """Clients the noise is calibrated for: as configured, or as many as FedAvg samples per round."""
        from strategies.fedavg import sample_size

        if self.num_sampled_clients is not None:
            return self.num_sampled_clients
        return sample_size(federation.num_clients, federation.fraction_fit, federation.min_fit_clients)

    def check_federation(self, federation: "FederationConfig") -> None:
        """What only the federation can tell (a one-line ValueError naming the key)."""
        if self.num_sampled_clients is not None and self.num_sampled_clients > federation.num_clients:
            raise ValueError(
                f"strategy.dp.num_sampled_clients = {self.num_sampled_clients}: must be <= "
                f"federation.num_clients ({federation.num_clients})"
            )
        from strategies.dp import DP_MECHANISMS

        if DP_MECHANISMS.get(self.kind).adaptive and self.noise_multiplier > 0:
            sampled = self.sampled_clients(federation)
            stddev = self.clipped_count_stddev if self.clipped_count_stddev is not None else sampled / 20
            origin = "" if self.clipped_count_stddev is not None else f" = num_sampled_clients / 20 = {sampled}/20"
            if self.noise_multiplier >= 2 * stddev:  # Flower's own precondition, checked before anything runs
                raise ValueError(
                    f"strategy.dp.noise_multiplier = {self.noise_multiplier}: adaptive clipping needs it "
                    f"< 2 * clipped_count_stddev ({stddev:g}{origin}); raise strategy.dp.clipped_count_stddev"
                )


SECAGG_STRATEGY = "secagg+"
SECAGG_MODULUS = 2**32  # Flower's modulus_range: the masked sum of every client's quantised update wraps at it


class SecAggConfig(Section):
    """Flower's SecAgg+ (SecAggPlusWorkflow / secaggplus_mod): masked, quantised updates; the server learns the sum."""

    num_shares: int | None = Field(
        None, ge=2, description="clients each client's secrets are shared with, itself included (null = every sampled client)"
    )
    reconstruction_threshold: int | None = Field(
        None, ge=2, description="shares that rebuild a secret; num_shares - threshold drop-outs are survived "
        "(null = a majority of num_shares)",
    )
    clipping_range: float = Field(
        8.0, gt=0, description="each client's weighted parameters (num-examples / max_weight x w) are clipped to +-this"
    )
    quantization_range: int = Field(
        2**22, ge=2, lt=2**31, description="integer levels the clipped range is quantised to (stochastic rounding)"
    )
    max_weight: float | None = Field(
        None, gt=0, description="largest client weight (num-examples) expected; null = the largest partition"
    )

    def shares(self, sampled: int) -> int:
        return self.num_shares if self.num_shares is not None else sampled

    def threshold(self, sampled: int) -> int:
        return self.reconstruction_threshold if self.reconstruction_threshold is not None else self.shares(sampled) // 2 + 1

    def check_federation(self, federation: "FederationConfig") -> None:
        """What only the number of sampled clients can tell (a one-line ValueError naming the key)."""
        from strategies.fedavg import sample_size

        sampled = sample_size(federation.num_clients, federation.fraction_fit, federation.min_fit_clients)
        if sampled < 2:
            raise ValueError(
                f"federation.num_clients = {federation.num_clients}: secagg+ samples {sampled} client per round; "
                "secure aggregation needs at least 2"
            )
        shares = self.shares(sampled)
        if shares > sampled:
            raise ValueError(
                f"strategy.secagg.num_shares = {shares}: must be <= the clients sampled per round ({sampled})"
            )
        if shares < sampled and shares % 2 == 0:
            raise ValueError(
                f"strategy.secagg.num_shares = {shares}: must be odd (a client and as many neighbours on each side) "
                f"or equal to the clients sampled per round ({sampled})"
            )
        threshold = self.threshold(sampled)
        if threshold > shares:
            raise ValueError(
                f"strategy.secagg.reconstruction_threshold = {threshold}: must be <= num_shares ({shares})"
            )
        if self.quantization_range * sampled > SECAGG_MODULUS:
            raise ValueError(
                f"strategy.secagg.quantization_range = {self.quantization_range}: the sum of {sampled} sampled clients "
                f"would overflow the 2^32 modulus; must be <= {SECAGG_MODULUS // sampled}"
            )


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
        from strategies import STRATEGIES

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


class AttackOptions(Section):
    """One attack and its options; null options take the attack's own defaults (see `fedsim list`)."""

    name: str = Field(..., description="attack name (see `fedsim list`)")
    iterations: int | None = Field(None, ge=1, description="optimisation steps per restart")
    restarts: int = Field(1, ge=1, description="independent random starts, batched; the lowest objective wins")
    init: Literal["randn", "uniform", "zeros"] | None = Field(None, description="dummy image initialisation")
    init_scale: float | None = Field(None, gt=0, description="std (randn) or half-range (uniform) of the init")
    tv_weight: float | None = Field(None, ge=0, description="total-variation prior weight")
    loss: Literal["l2", "cosine", "l1"] | None = Field(None, description="gradient-matching distance")
    optimizer: Literal["lbfgs", "adam", "sgd"] | None = Field(None, description="optimizer of the dummy data")
    lr: float | None = Field(None, gt=0, description="optimizer step size")
    bn_weight: float | None = Field(None, ge=0, description="BatchNorm-statistics prior weight (gradinversion)")
    precision: Literal["float32", "float64"] = Field("float32", description="arithmetic of the attack")
    deterministic: bool = Field(False, description="use deterministic kernels (slower on GPU)")
    log_every: int = Field(0, ge=0, description="keep a trajectory point every N iterations (0 = none)")
    inverts: Literal["both", "per-client", "aggregate"] = Field(
        "both", description="which of adversary.targets this attack inverts (priors that suit one kind only)"
    )

    def applies_to(self, target: str) -> bool:
        """Whether this attack inverts ``target`` (``client:<id>`` or ``aggregate``)."""
        return self.inverts == "both" or (self.inverts == "aggregate") == (target == "aggregate")

    @field_validator("name")
    @classmethod
    def _known_attack(cls, value: str) -> str:
        from adversary import ATTACKS

        if value not in ATTACKS:
            raise ValueError(ATTACKS.unknown_message(value))
        return value


class AdversaryKnowledge(Section):
    local_training: bool = Field(True, description="the victims' lr, local steps and batch size are known")
    num_samples: bool = Field(True, description="the number of samples behind each update is known")
    labels: Literal["inferred", "known"] = Field("inferred", description="labels are recovered, or granted")
    bn_statistics: bool = Field(False, description="BatchNorm statistics of the victims' batches may be used")


RoundSpec = Union[Literal["all"], list[int], str]


class AdversaryConfig(Section):
    tap: Literal["mitm", "server"] = Field(
        "mitm", description="`mitm`: each reply on the wire; `server`: what the strategy sees (only the sum under SecAgg+)"
    )
    targets: Literal["per-client", "aggregate", "both"] = Field("per-client", description="what gets inverted")
    rounds: RoundSpec = Field("all", description="rounds to attack: `all`, a list [1, 3], or an interval `2-5`")
    clients: Literal["all"] | list[int] = Field("all", description="victims attacked per client: `all` or a list")
    knows: AdversaryKnowledge = Field(default_factory=AdversaryKnowledge, description="the threat model's knowledge")
    attacks: list[AttackOptions] = Field(default_factory=list, description="attacks to run (empty = no adversary)")
    device: str = Field("auto", description="where attacks run: `auto`, `cpu`, `cuda`, `cuda:N`")
    workers: int = Field(
        1, ge=1, description="attacks running at once, beside the training (on CPU they share the cores)"
    )
    save_images: bool = Field(True, description="write original-over-reconstruction PNG grids per round and target")

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
        return value

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        return _check_device(value)

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
    run_name: str | None = Field(None, description="run directory name (null = <name>-<timestamp>)")
    save_checkpoints: bool = Field(True, description="keep every round's global model (the latest is always kept, for --resume)")
    ground_truth: bool = Field(True, description="record which samples each client trained on, per round")

    @field_validator("run_name")
    @classmethod
    def _safe_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9._-]+", value):
            raise ValueError(f"'{value}' may only contain letters, digits, '.', '_' and '-'")
        return value


# -------------------------------------------------------------------------------------------- root


class ExperimentConfig(Section):
    name: str = Field("fedsim", min_length=1, description="experiment name, used in the run directory")
    seed: int = Field(0, ge=0, description="seed of data partitioning, model init, sampling and training")
    device: str = Field("auto", description="`auto` (cuda when available), `cpu`, `cuda` or `cuda:N`")
    data: DataConfig = Field(default_factory=DataConfig, description="data set, size and partitioning")
    model: ModelConfig = Field(default_factory=ModelConfig, description="the federated model")
    federation: FederationConfig = Field(default_factory=FederationConfig, description="clients and rounds")
    client: ClientConfig = Field(default_factory=ClientConfig, description="local training on each client")
    strategy: StrategyConfig = Field(default_factory=StrategyConfig, description="server-side aggregation")
    adversary: AdversaryConfig = Field(default_factory=AdversaryConfig, description="attacks on the updates")
    output: OutputConfig = Field(default_factory=OutputConfig, description="where and what a run records")

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        return _check_device(value)

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


# Discriminated unions: the field holding them -> their variants by tag. Pydantic puts the tag into
# error locations; it is not a key the user wrote.
_TAGGED_FIELDS: dict[str, dict[str, type[Section]]] = {"partition": PARTITIONS, "defenses": DEFENSE_CONFIGS}


def _format_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    field = None
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
            continue
        if field in _TAGGED_FIELDS and item in _TAGGED_FIELDS[field]:
            field = None
            continue
        parts.append(("." if parts else "") + str(item))
        field = item
    return "".join(parts)


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names allowed at the parent of ``loc`` (for "did you mean" hints)."""
    current: Any = model
    field = None
    for item in loc[:-1]:
        if isinstance(item, int) or current is None:
            continue
        if field in _TAGGED_FIELDS and item in _TAGGED_FIELDS[field]:
            current, field = _TAGGED_FIELDS[field][item], None
            continue
        info = current.model_fields.get(item) if hasattr(current, "model_fields") else None
        if info is None:
            return []
        current, field = _first_model(info.annotation), item
    return list(current.model_fields) if current is not None and hasattr(current, "model_fields") else []


def _first_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _first_model(arg)
        if found is not None:
            return found
    return None


def _one_line(error: ValidationError) -> str:
    first = error.errors()[0]
    loc = tuple(first["loc"])
    path = _format_path(loc)
    value = first.get("input")
    if first["type"] == "extra_forbidden":
        allowed = _fields_at(ExperimentConfig, loc)
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"unknown key '{path}'{hint}; allowed here: {', '.join(allowed)}"
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "union_tag_invalid":
        kind, allowed = ("defense", DEFENSE_CONFIGS) if "defenses" in loc else ("partition", PARTITIONS)
        return f"{path}.name = {first['ctx'].get('tag')!r}: unknown {kind}; allowed: {', '.join(allowed)}"
    if isinstance(value, dict) and re.match(r"[\w.\[\]]+ = ", message):
        # a section-level check that already names its key, e.g. "path = null: ..."
        return f"{path}.{message}" if path else message
    if isinstance(value, dict) or first["type"] == "missing":
        return f"{path}: {message}"
    return f"{path} = {value!r}: {message}"


def parse_config(raw: dict[str, Any]) -> ExperimentConfig:
    """Validate a plain dict into an ExperimentConfig, raising ConfigError with one line."""
    if not isinstance(raw, dict):
        raise ConfigError(f"config must be a mapping of sections, got {type(raw).__name__}")
    try:
        return ExperimentConfig.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(_one_line(error)) from None


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
    return raw


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


def dump_config(config: ExperimentConfig) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


# ------------------------------------------------------------------------------------------- schema


def schema_rows(model: type[BaseModel] = ExperimentConfig, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key path, type, default, description) for every field, nested sections flattened."""
    rows: list[tuple[str, str, str, str]] = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        if name == "partition":
            rows.append((path, " | ".join(PARTITIONS), "iid", field.description or ""))
            for variant in PARTITIONS.values():
                tag = variant.model_fields["name"].default
                for sub, sub_field in variant.model_fields.items():
                    if sub != "name":
                        rows.append((f"{path}.{sub}", _type_name(sub_field.annotation),
                                     _default_text(sub_field.default), f"({tag}) {sub_field.description}"))
            continue
        nested = _first_model(field.annotation)
        if nested is not None:
            is_list = get_origin(field.annotation) is list
            default = "[]" if is_list else ""
            rows.append((path, "list" if is_list else "section", default, field.description or ""))
            rows.extend(schema_rows(nested, f"{path}[]." if is_list else f"{path}."))
            continue
        default = field.default_factory() if field.default_factory is not None else field.default
        rows.append((path, _type_name(field.annotation), _default_text(default), field.description or ""))
    return rows


def _default_text(value: Any) -> str:
    if value is PydanticUndefined:
        return "(required)"
    return json.dumps(value.model_dump(mode="json") if isinstance(value, BaseModel) else value, default=str)


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
