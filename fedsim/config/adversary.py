"""The ``adversary`` section: where the attacker taps, what it knows, which rounds and clients it attacks,
its attacks (or the `strongest` portfolio) with their budget and tuning, the verdict's test and the privacy audit.

``adversary.attacks[]`` and ``adversary.modification`` are declared with the base of their plugins' config models;
``fedsim.config.compose`` puts the union of every registered plugin there before anything validates.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from adversary.inversion.options import AttackOptions
from adversary.modifications import MODIFICATIONS, ModificationConfig
from adversary.privacy_audit.config import AuditConfig
from adversary.registry import ATTACKS, split_preset
from adversary.tap_positions import TAPS
from adversary.tap_positions.registry import malicious_server_positions
from fedsim.core.sections import Renamed, Section, check_device

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
        2,
        ge=1,
        description="attacks saturated per target: the best by the attacker's ranking (attacks built for a "
        "defense in force first, then the lowest gradient match)",
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
        "budget, each target's best by the attacker's ranking on more: attacks built for a defense in force first, "
        "then the lowest gradient match), so that only the leaders run their full budget; "
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
    privacy_audit: AuditConfig | None = Field(
        None,
        description="one-run privacy audit (canaries): a lower bound on epsilon beside the accountant's; null = off",
    )

    #: ``audit`` named the privacy audit until ``fedsim audit`` (a Flower app's audit) took the word: configs and
    #: runs written before still load (``fedsim.config.migrate.upgrade``)
    renamed_keys: ClassVar[tuple[Renamed, ...]] = (Renamed("audit", "privacy_audit"),)

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
                if preset is not None and preset not in ATTACKS.options(base).presets:
                    allowed = ", ".join(sorted(ATTACKS.options(base).presets)) or "none"
                    raise ValueError(
                        f"portfolio_exclude: '{name}': {base} has no preset '{preset}'; allowed: {allowed}"
                    )
            attacks = []
            for name in ATTACKS.names():
                if name in excluded:  # an attack's name leaves out its presets too
                    continue
                model = ATTACKS.options(name)
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
                imprint = MODIFICATIONS.config("imprint")
                assert imprint is not None, "the imprint modification registers its options model"
                self.__dict__["modification"] = imprint()
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
