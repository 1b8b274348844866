"""The sections of an experiment config (``federation``, ``client``, ``strategy``, ``adversary``, ``output``
and the root ``ExperimentConfig``), with the checks that span keys or sections.

A field that holds a plugin's config (``client.defenses[]``, ``adversary.attacks[]``,
``adversary.modification``, ``data``, ``model``) is declared here with the base of that plugin kind's config
models; ``fedsim.config.compose`` puts the union of every registered plugin there before anything validates.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from adversary.audit.config import CLIENT, AuditConfig, audit_level
from adversary.inversion.options import AttackOptions
from adversary.modifications import MODIFICATIONS, ModificationConfig
from adversary.registry import ATTACKS, split_preset
from adversary.tap_positions import TAPS
from adversary.tap_positions.registry import malicious_server_positions
from clients.defenses.base import DefenseConfig
from clients.defenses.registry import DEFENSES
from fedsim.core.sections import Section, check_device
from fedsim.data.config import DataConfig
from fedsim.models import ModelConfig
from strategies.dp import DpConfig
from strategies.registry import DP_MECHANISMS, STRATEGIES
from strategies.secagg import SECAGG_STRATEGY, SECAGG_TRAINING_STAGE, SecAggConfig

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
        None,
        description="secagg+ only: the protocol stage it fails in (null = collect_masked_vectors, where it trains)",
    )

    @model_validator(mode="after")
    def _nan_needs_training(self) -> FailureInjection:
        if self.kind == "nan" and self.stage not in (None, SECAGG_TRAINING_STAGE):
            raise ValueError(
                f"stage = '{self.stage}': a nan loss comes from training, which happens in stage "
                f"'{SECAGG_TRAINING_STAGE}'; use kind exception or hang in other stages"
            )
        return self


class PlateauConfig(Section):
    """Stop training once test accuracy stops improving (``fedsim.core.plateau``)."""

    patience: int = Field(5, ge=1, description="evaluations in a row without an improvement after which training stops")
    min_delta: float = Field(
        0.001, ge=0, lt=1, description="an evaluation improves when it beats the best accuracy so far by more than this"
    )


class FederationConfig(Section):
    num_clients: int = Field(4, ge=1, le=10_000, description="number of simulated clients (partitions)")
    rounds: int = Field(3, ge=1, description="number of federated rounds (with `plateau`: the most rounds played)")
    plateau: PlateauConfig | None = Field(
        None,
        description="stop when test accuracy stops improving (never before the last attacked round); "
        "null: play every round",
    )
    target_accuracy: float | None = Field(
        None, gt=0, le=1, description="the run reports the first round whose test accuracy reaches this (null: none)"
    )
    fraction_fit: float = Field(1.0, gt=0, le=1, description="share of clients sampled for training each round")
    min_fit_clients: int = Field(1, ge=1, description="successful replies a round needs to update the model")
    fraction_evaluate: float = Field(
        0.0, ge=0, le=1, description="share of clients that also evaluate the global model on their own data"
    )
    round_timeout: float = Field(
        3600.0, gt=0, description="seconds to wait for replies before a client counts as failed"
    )
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
    def _consistent(self) -> FederationConfig:
        if self.min_fit_clients > self.num_clients:
            raise ValueError(f"min_fit_clients = {self.min_fit_clients}: must be <= num_clients ({self.num_clients})")
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


def _training_defenses() -> list[str]:
    return [name for name in DEFENSES if DEFENSES.get(name).kind == "training"]


class ClientConfig(Section):
    optimizer: Literal["sgd", "adam"] = Field("sgd", description="local optimizer")
    lr: float = Field(0.1, gt=0, description="local learning rate")
    momentum: float = Field(0.0, ge=0, lt=1, description="SGD momentum")
    weight_decay: float = Field(0.0, ge=0, description="L2 weight decay")
    batch_size: int = Field(32, ge=1, description="local mini-batch size")
    local_steps: int | None = Field(
        None, ge=1, description="local optimizer steps per round (exclusive with local_epochs)"
    )
    local_epochs: int | None = Field(
        None, ge=1, description="local epochs per round (default 1 when local_steps is unset)"
    )
    defenses: list[DefenseConfig] = Field(
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
        return (
            [{"name": item} if isinstance(item, str) else item for item in value] if isinstance(value, list) else value
        )

    @field_validator("defenses")
    @classmethod
    def _training_defenses_once(cls, value: list[Any]) -> list[Any]:
        training = _training_defenses()
        for name in training:
            if sum(defense.name == name for defense in value) > 1:
                raise ValueError(f"'{name}' is listed twice; a client trains with it at most once")
        listed = [name for name in training if name in {defense.name for defense in value}]
        if len(listed) > 1:
            raise ValueError(
                f"{' and '.join(repr(name) for name in listed)} both change the local training; list only one of them"
            )
        return value

    @model_validator(mode="after")
    def _steps_or_epochs(self) -> ClientConfig:
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
    def _secagg_parameters(self) -> StrategyConfig:
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
                f"secagg = {self.secagg.model_dump(exclude_unset=True)}: "
                f"SecAgg+ parameters need strategy.name = {SECAGG_STRATEGY} "
                f"(name is '{self.name}')"
            )
        return self


# ---------------------------------------------------------------------------------------- adversary


# Attacks: one options model per attack, discriminated by `name`, each declared and registered beside
# the attack in adversary/attacks (``AttackOptions(name=...)`` builds the one of that name). A malicious
# server's model modification (adversary/modifications), discriminated by `name` too.


class AdversaryKnowledge(Section):
    local_training: bool = Field(True, description="the victims' lr, local steps and batch size are known")
    num_samples: bool = Field(True, description="the number of samples behind each update is known")
    labels: Literal["inferred", "known"] = Field("inferred", description="labels are recovered, or granted")
    bn_statistics: bool = Field(False, description="BatchNorm statistics of the victims' batches may be used")


RoundSpec = Literal["all"] | list[int] | str


class AttackWorkerResources(Section):
    cpus: float = Field(1.0, gt=0, description="CPU cores per attack worker (its torch threads), kept from the clients")
    gpus: float = Field(0.0, ge=0, description="GPU share per attack worker on a CUDA device (fractions allowed)")


class AttackBudget(Section):
    """The saturation step of `attacks: strongest` (adversary.inversion.saturation): the leading attacks get more
    iterations and restarts until their own objective stops improving, or a cap is reached."""

    saturate: bool = Field(
        True, description="with `attacks: strongest`: rerun the leading attacks with more budget until they saturate"
    )
    leaders: int = Field(
        2, ge=1, description="attacks saturated per target: the best by the attacker-side gradient match"
    )
    growth: int = Field(2, ge=2, le=16, description="factor on iterations and restarts from one pass to the next")
    tolerance: float = Field(
        0.01, gt=0, lt=1, description="relative improvement of an attack's own objective below which it has saturated"
    )
    resolution: float = Field(
        1 / 255,
        ge=0,
        lt=1,
        description="root-mean-square move of a reconstruction, as a fraction of the valid input range, below which "
        "more budget has not changed the answer whatever its objective did (1/255: one grey level of an 8-bit image)",
    )
    max_iterations: int = Field(20_000, ge=1, description="cap on iterations per restart")
    max_restarts: int = Field(16, ge=1, description="cap on restarts")
    max_seconds: float | None = Field(
        1800.0,
        gt=0,
        description="cap on the saturation passes of one group of targets, in seconds (null = none); a leader gets "
        "an equal share of what is left when its turn comes",
    )
    race: bool = Field(
        True,
        description="with `attacks: strongest`: race the attacks first (successive halving: every attack on a small "
        "budget, each target's best by gradient match on more), so that only the leaders run their full budget; "
        "false: every attack runs its full budget before the leaders are chosen",
    )
    rungs: int = Field(
        3,
        ge=1,
        le=8,
        description="with `budget.race`: rungs before an attack's own budget; rung 0 runs iterations / growth^rungs",
    )
    finalists: int = Field(
        1,
        ge=1,
        description="with `budget.race`: attacks per target still in the race at the last rung (their own budget), "
        "of which the `leaders` best are saturated",
    )


class VerdictTest(Section):
    """The test behind every verdict (``fedsim.judge.floor``): guesses made without the update, scored as
    reconstructions."""

    level: float = Field(
        0.05,
        gt=0,
        lt=0.5,
        description="false-positive rate of a `leaks` verdict: how often a guess without the update is called `leaks`",
    )
    draws: int = Field(
        256,
        ge=19,
        le=100_000,
        description="random guesses per guess family and target (the p-value's resolution is 1/(draws+1))",
    )


class AttackTuning(Section):
    """Attack hyper-parameters (regularizer weights, step size, init scale) tuned on public images in the run's
    setting, before the attacks run (adversary.inversion.tuning)."""

    select: Literal["adaptive", "all", "none"] = Field(
        "adaptive",
        description="which attacks are tuned: `adaptive` (those adapted to a client defense in force, whose published "
        "settings were chosen for another problem), `all` optimisation attacks, or `none`",
    )
    trials: int = Field(12, ge=1, le=1000, description="Optuna trials per attack; trial 0 is the attack's own settings")
    problems: int = Field(
        2, ge=1, le=64, description="public problems tuned on: updates the clients would send from public images"
    )
    max_iterations: int | None = Field(
        None, ge=1, description="iterations per trial (null: the attack's own); fewer is cheaper, and favours speed"
    )
    cache: str | None = Field(
        "~/.cache/fedsim/tuning",
        description="folder of tuned settings, reused by any run of the same setting (null: tune in every run)",
    )


class AdversaryConfig(Section):
    # fedsim.config.compose retypes it as the Literal of the registered tap positions
    tap: str = Field(
        "mitm",
        description="`mitm`: each reply on the wire; `server`: what the strategy sees (only the sum under SecAgg+)",
    )
    targets: Literal["per-client", "aggregate", "both"] = Field("per-client", description="what gets inverted")
    server: Literal["honest", "malicious"] = Field(
        "honest",
        description="`malicious`: in the attacked rounds the server sends adversary.modification instead of the "
        "global model and uses the replies only for the attack (those rounds do not train); needs tap: server",
    )
    modification: ModificationConfig | None = Field(
        None, description="what a malicious server sends, e.g. {name: imprint, bins: 128} (null = imprint's defaults)"
    )
    rounds: RoundSpec = Field("all", description="rounds to attack: `all`, a list [1, 3], or an interval `2-5`")
    clients: Literal["all"] | list[int] = Field("all", description="victims attacked per client: `all` or a list")
    knows: AdversaryKnowledge = Field(default_factory=AdversaryKnowledge, description="the threat model's knowledge")
    attacks: list[AttackOptions] = Field(
        default_factory=list,
        description="attacks to run (empty = no adversary), or `strongest`: every registered attack whose requirements "
        "hold for the run's model, defenses and threat model, adaptive ones where their defense is in force",
    )
    portfolio_options: dict[str, Any] = Field(
        default_factory=dict,
        description="with `attacks: strongest`: options given to every attack of the portfolio that has them "
        "(a preset keeps the options it sets itself), e.g. {iterations: 300, restarts: 2, time_limit: 120}",
    )
    portfolio_exclude: list[str] = Field(
        default_factory=list,
        description="with `attacks: strongest`: attacks left out of the portfolio (e.g. [ggssr]; a name leaves out its "
        "presets too, `dlg@paper-003` that preset only)",
    )
    budget: AttackBudget = Field(
        default_factory=AttackBudget,
        description="`attacks: strongest`'s saturation step and its caps (time or iterations); every row records the "
        "budget it ran with and whether it saturated",
    )
    tuning: AttackTuning = Field(
        default_factory=AttackTuning,
        description="attack hyper-parameters tuned on public images of the run's data set, model and defenses; every "
        "tuned row records what was chosen",
    )
    portfolio: Literal["listed", "strongest"] = Field(
        "listed",
        description="`strongest` (set by `attacks: strongest`): attacks whose requirements fail are left out at the "
        "start of the run instead of refused",
    )
    device: str = Field("auto", description="where attacks run: `auto`, `cpu`, `cuda`, `cuda:N`")
    workers: int = Field(
        1,
        ge=1,
        description="attack worker processes running at once, beside the training (each holds adversary.resources)",
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
    floor: VerdictTest = Field(
        default_factory=VerdictTest,
        description="the verdict's test: its level and the random guesses per family it compares each score with",
    )
    audit: AuditConfig | None = Field(
        None,
        description="one-run privacy audit (canaries): a lower bound on epsilon beside the accountant's; null = off",
    )

    @model_validator(mode="before")
    @classmethod
    def _strongest_portfolio(cls, data: Any) -> Any:
        # `attacks: strongest` lists every registered attack with its defaults and with each of its presets (the
        # published settings); the run keeps those that apply
        if isinstance(data, dict) and data.get("attacks") == "strongest":
            shared = dict(data.get("portfolio_options") or {})
            excluded = {str(name) for name in data.get("portfolio_exclude") or []}
            for name in sorted(excluded):
                base, preset = split_preset(name)
                if base not in ATTACKS:
                    raise ValueError(f"portfolio_exclude: {ATTACKS.unknown_message(base)}")
                if preset is not None and preset not in ATTACKS.config(base).presets:
                    allowed = ", ".join(sorted(ATTACKS.config(base).presets)) or "none"
                    raise ValueError(
                        f"portfolio_exclude: '{name}': {base} has no preset '{preset}'; allowed: {allowed}"
                    )
            attacks = []
            for name in ATTACKS.names():
                if name in excluded:  # an attack's name leaves out its presets too
                    continue
                model = ATTACKS.config(name)
                own = {key: value for key, value in shared.items() if key in model.model_fields}
                attacks.append({"name": name, **own})
                for preset, settings in model.presets.items():
                    if f"{name}@{preset}" not in excluded:
                        # a preset's own settings win over the shared options: else it would not be that preset
                        kept = {key: value for key, value in own.items() if key not in settings.options}
                        attacks.append({"name": name, "preset": preset, **kept})
            unused = [key for key in shared if not any(key in entry for entry in attacks)]
            if unused:
                raise ValueError(f"portfolio_options.{unused[0]}: no attack of the portfolio has this option")
            data = {**data, "attacks": attacks, "portfolio": "strongest"}
        return data

    @field_validator("attacks", mode="before")
    @classmethod
    def _attack_shorthand(cls, value: Any) -> Any:
        # `attacks: [dlg, ig]` is shorthand for `attacks: [{name: dlg}, {name: ig}]`, and `dlg@paper-003` for
        # `{name: dlg, preset: paper-003}` (the name chooses the options model before anything else validates)
        if not isinstance(value, list):
            return value
        entries = [{"name": item} if isinstance(item, str) else item for item in value]
        return [_preset_split(entry) for entry in entries]

    @field_validator("rounds")
    @classmethod
    def _round_spec(cls, value: RoundSpec) -> RoundSpec:
        if isinstance(value, str) and value != "all" and not re.fullmatch(r"\d+-\d+", value):
            raise ValueError(
                f"'{value}' is not a round spec; allowed: all, a list like [1, 3], or an interval like 2-5"
            )
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

    @field_validator("tap", mode="before")  # before the Literal that fedsim.config.compose puts there
    @classmethod
    def _known_tap(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in TAPS:
            raise ValueError(TAPS.unknown_message(value))
        return value

    @model_validator(mode="after")
    def _malicious_server(self) -> AdversaryConfig:
        if self.server == "malicious":
            if not TAPS.get(self.tap).malicious_server:
                raise ValueError(
                    f"server = malicious with tap = {self.tap}: the malicious server attacks what it "
                    f"receives; set tap: {' or '.join(malicious_server_positions())}"
                )
            if self.modification is None:
                self.__dict__["modification"] = MODIFICATIONS.config("imprint")()
        elif self.modification is not None:
            raise ValueError(
                f"modification = {{name: {self.modification.name}, ...}}: only a malicious server "
                "modifies the model; set server: malicious, or modification: null"
            )
        return self

    @model_validator(mode="after")
    def _attacks_have_targets(self) -> AdversaryConfig:
        for index, attack in enumerate(self.attacks):
            if attack.inverts != "both" and self.targets not in ("both", attack.inverts):
                raise ValueError(
                    f"attacks.{index}.inverts = {attack.inverts}: this attack would never run, "
                    f"targets is '{self.targets}'; "
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

    def first_attacked_round(self) -> int:
        """The first round ``rounds`` selects (1 for `all`); whether a run attacks at all is this <= its rounds."""
        if self.rounds == "all":
            return 1
        if isinstance(self.rounds, list):
            return min(self.rounds)
        return int(self.rounds.split("-")[0])

    def last_attacked_round(self) -> int:
        """The last round a list or interval of ``rounds`` attacks; 0 for `all` or no attack (every round counts)."""
        if not self.attacks or self.rounds == "all":
            return 0
        if isinstance(self.rounds, list):
            return max(self.rounds)
        return int(self.rounds.split("-")[1])

    def attacks_client(self, client: int) -> bool:
        return self.clients == "all" or client in self.clients


def _preset_split(entry: Any) -> Any:
    """``{name: dlg@paper-003, ...}`` -> ``{name: dlg, preset: paper-003, ...}`` (other entries as they are)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        return entry
    name, preset = split_preset(entry["name"])
    if preset is None:
        return entry
    if entry.get("preset") not in (None, preset):
        raise ValueError(f"name = '{entry['name']}' and preset = '{entry['preset']}' name two presets; keep one")
    return {**entry, "name": name, "preset": preset}


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
    save_checkpoints: bool = Field(
        True, description="keep every round's global model (the latest is always kept, for --resume)"
    )
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
        return check_device(value)

    @field_validator("name")
    @classmethod
    def _name_is_one_folder(cls, value: str) -> str:
        return directory_name(value)  # the run directory is <output.dir>/<name>-<timestamp>

    @model_validator(mode="after")
    def _adversary_selects_what_exists(self) -> ExperimentConfig:
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
        if adversary.first_attacked_round() > federation.rounds:  # not a walk over the rounds: there may be 10**9
            raise ValueError(
                f"adversary.rounds = {adversary.rounds!r}: selects no round of 1 .. {federation.rounds} "
                f"(federation.rounds = {federation.rounds})"
            )
        return self

    @model_validator(mode="after")
    def _audit_fits_the_run(self) -> ExperimentConfig:
        audit, dp = self.adversary.audit, self.strategy.dp
        if audit is None:
            return self
        client_level = audit_level(dp, self.strategy.secagg) == CLIENT  # strategy.dp or SecAgg+
        if not client_level and audit.host >= self.federation.num_clients:
            raise ValueError(
                f"adversary.audit.host = {audit.host}: must be < federation.num_clients ({self.federation.num_clients})"
            )
        if self.adversary.server == "malicious":
            raise ValueError(
                "adversary.audit with adversary.server = malicious: the clients would train the server's modified "
                "model, not the one the canaries were drawn for; audit with an honest server"
            )
        if audit.threat_model == "black-box" and client_level:
            raise ValueError(
                "adversary.audit.threat_model = 'black-box': canary examples audit example-level DP; under strategy.dp "
                f"or {SECAGG_STRATEGY} (client level) use white-box or final-model"
            )
        if audit.threat_model == "black-box" and self.adversary.attacks:
            raise ValueError(
                "adversary.audit.threat_model = 'black-box': the canary examples join the host's data, which the "
                "attacks' ground truth does not hold; audit black-box in a run without adversary.attacks"
            )
        if dp is not None and (dp.estimator != "fixed-denominator" or DP_MECHANISMS.get(dp.kind).adaptive):
            raise ValueError(
                f"adversary.audit with strategy.dp.kind = '{dp.kind}', estimator = '{dp.estimator}': canary clients "
                "need a fixed clipping norm and the fixed-denominator estimator (kind server-fixed or client-fixed)"
            )
        return self

    @model_validator(mode="after")
    def _dp_fits_federation(self) -> ExperimentConfig:
        if self.strategy.dp is not None:
            self.strategy.dp.check_federation(self.federation)
        return self

    @model_validator(mode="after")
    def _secagg_fits_federation(self) -> ExperimentConfig:
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
