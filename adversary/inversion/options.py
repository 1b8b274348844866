"""The config models of attacks: what every attack has, and what every optimisation attack has.

Each attack module subclasses ``OptimizationOptions`` with ``name: Literal[<its name>]`` and its defaults
(``field_defaults``), and registers it: ``ATTACKS.register(name, help=..., config=ItsOptions)``. A key
that the attack's model does not declare is an error naming the attack.

``AttackOptions(name="ig", iterations=500)`` builds the model registered for ``name`` (the options of one
attack, as the adversary and ``run_attack`` take them); keys of older configs (``tv_weight``,
``bn_weight``) are accepted with one deprecation line (see ``renamed_keys``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

import torch
from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticUndefined

from adversary.inversion.objective import gradient_distance
from adversary.inversion.regularizers import REGULARIZERS, RegularizerConfig
from adversary.inversion.requirements import AttackSetting
from adversary.registry import ATTACKS, PRESET_SEPARATOR, split_preset
from fedsim.core.registry import Registry
from fedsim.core.sections import PluginSection, Renamed, yaml_flow


@dataclass(frozen=True)
class Preset:
    """Named settings of an attack that reproduce a published configuration.

    ``options`` become the attack's defaults when a config names the preset (keys given beside ``preset``
    still win), and are validated by the attack's own options model like any config; ``source`` says which
    paper, section or code they come from, for `fedsim list` and the config reference.
    """

    options: Mapping[str, Any]
    source: str
    summary: str = field(default="")  # the settings in a few words, for `fedsim list`


class AttackOptions(PluginSection):
    """One attack and its options; ``AttackOptions(name=..., **options)`` builds the model that attack registered."""

    plugins: ClassVar[Registry[Any]] = ATTACKS

    name: str = Field(..., description="attack name (see `fedsim list`)")
    inverts: Literal["both", "per-client", "aggregate"] = Field(
        "both", description="which of adversary.targets this attack inverts (priors that suit one kind only)"
    )
    preset: str | None = Field(
        None,
        description="named settings of a paper for this attack (`fedsim list` shows each with its source): they are "
        "the attack's defaults, keys given beside them win; `attacks: [dlg@paper-003]` is shorthand",
    )

    #: defenses whose public mechanism this attack models (an adaptive variant): `adversary.attacks: strongest`
    #: runs it only where one of them is in force, and `fedsim list` shows it
    adapts_to: ClassVar[tuple[str, ...]] = ()
    #: the options ``adapted`` fills in from the defenses in force, where the config leaves them unset (a run
    #: records its attacks adapted, so a sweep compares a point with its run without them)
    adapted_fields: ClassVar[frozenset[str]] = frozenset()
    #: the server that produces this attack's input: "honest" (honest-but-curious server or a wire tap) or
    #: "malicious" (needs adversary.server: malicious)
    threat_model: ClassVar[str] = "honest"
    #: what the attack needs beyond an update, in words, for `fedsim list` (``refusal`` checks it)
    requires: ClassVar[str] = ""
    #: the inputs it reconstructs: "image", or "text" (token ids of a language model,
    #: ``fedsim.models.architectures.text``)
    modality: ClassVar[str] = "image"
    #: published settings of this attack by name (``preset``); `attacks: strongest` runs each beside the defaults
    presets: ClassVar[dict[str, Preset]] = {}

    @model_validator(mode="before")
    @classmethod
    def _preset_defaults(cls, data: Any) -> Any:
        # A preset's options are merged under what the config gives, before the fields validate, so that the
        # attack's own model checks them (a preset is validated like any attack config).
        if not isinstance(data, dict):
            return data
        name = data.get("name")
        if isinstance(name, str) and PRESET_SEPARATOR in name:
            base, preset = split_preset(name)
            if data.get("preset") not in (None, preset):
                raise ValueError(f"name = '{name}' and preset = '{data['preset']}' name two presets; keep one")
            data = {**data, "name": base, "preset": preset}
        preset = data.get("preset")
        if preset is None:
            return data
        if preset not in cls.presets:
            attack = data.get("name", cls.__name__)
            allowed = ", ".join(sorted(cls.presets)) or f"none ({attack} has no preset)"
            raise ValueError(f"preset = '{preset}': not a preset of {attack}; allowed: {allowed}")
        given = {
            key: value for key, value in data.items() if value is not None or key not in cls.presets[preset].options
        }
        return {**copy.deepcopy(dict(cls.presets[preset].options)), **given}

    @property
    def label(self) -> str:
        """How rows, grids and tables name this attack: its name, with its preset if any (``dlg@paper-003``)."""
        return f"{self.name}{PRESET_SEPARATOR}{self.preset}" if self.preset else self.name

    def refusal(self, setting: AttackSetting) -> str | None:
        """One line saying why this attack cannot run in ``setting`` (model, defenses, threat model), or None.

        The config refuses a run that names an attack with a refusal; ``strongest`` leaves such attacks out.
        """
        if self.threat_model == "malicious" and setting.server != "malicious":
            return f"{self.name} needs a malicious server (adversary.server: malicious); the server is {setting.server}"
        model_modality = getattr(setting.model, "modality", "image")
        if model_modality != self.modality:
            article = "an" if model_modality[0] in "aeiou" else "a"
            return f"{self.name} reconstructs {self.modality}; {setting.model_name} is {article} {model_modality} model"
        return None

    def adapted(self, setting: AttackSetting) -> AttackOptions:
        """These options with what the attack takes from the public mechanisms of ``setting``'s defenses filled in
        (adaptive variants override it); called once the run's model and defenses are known."""
        return self

    def applies_to(self, target: str) -> bool:
        """Whether this attack inverts ``target`` (``client:<id>`` or ``aggregate``)."""
        return self.inverts == "both" or (self.inverts == "aggregate") == (target == "aggregate")


# ------------------------------------------------------------------------------------- regularizers


def _regularizer_union() -> Any:
    variants = tuple(REGULARIZERS.configs().values())
    union = Union.__getitem__(variants)  # Union[...] over a tuple built at run time: `|` cannot spell it
    return Annotated[union, Field(discriminator="name")] if len(variants) > 1 else variants[0]


if TYPE_CHECKING:  # the type checker reads the base class, pydantic the union of every registered regularizer
    Regularizers = list[RegularizerConfig]
else:
    Regularizers = list[_regularizer_union()]


def _fold_into_regularizers(term: str, old: str) -> Renamed:
    """``<old>: w`` -> the attack's regularizers (as given, else its default) with ``term``'s weight set to w."""

    def move(raw: dict[str, Any], model: type[Any]) -> str:
        weight = raw.pop(old)
        if "regularizers" in raw and any(_name_of(item) == term for item in raw["regularizers"] or []):
            raise ValueError(
                f"{old} = {weight!r} and regularizers [{term}] both set the {term} weight; keep only "
                f"regularizers: [{{name: {term}, weight: {weight}}}]"
            )
        given = raw.get("regularizers")
        entries = [_as_dict(item) for item in (given if given is not None else _default_of(model, "regularizers"))]
        for entry in entries:
            if entry["name"] == term:
                entry["weight"] = weight
                break
        else:
            entries.append({"name": term, "weight": weight})
        raw["regularizers"] = entries
        return f"regularizers: {yaml_flow(entries)}"

    return Renamed(old, f"regularizers[{term}].weight", move)


def _name_of(item: Any) -> Any:
    return (
        item if isinstance(item, str) else (item.get("name") if isinstance(item, dict) else getattr(item, "name", None))
    )


def _as_dict(item: Any) -> dict[str, Any]:
    if isinstance(item, str):
        return {"name": item}
    if isinstance(item, dict):
        return dict(item)
    return item.model_dump()


def _default_of(model: type[Any], key: str) -> Any:
    field = model.model_fields[key]
    return field.default_factory() if field.default_factory is not None else field.default


TV_WEIGHT = _fold_into_regularizers("tv", "tv_weight")
BN_WEIGHT = _fold_into_regularizers("bn_statistics", "bn_weight")


# ------------------------------------------------------------------------------------- optimisation


class OptimizationOptions(AttackOptions):
    """The options of an attack that optimises dummy data until its update matches the observed one.

    Subclasses set ``name`` and ``field_defaults`` (field -> the attack's default): they become the real
    defaults of the subclass's fields, so a config lists what the attack runs with.
    """

    field_defaults: ClassVar[dict[str, Any]] = {}
    renamed_keys: ClassVar[tuple[Renamed, ...]] = (TV_WEIGHT,)

    iterations: int = Field(1000, ge=1, description="optimisation steps per restart")
    restarts: int = Field(1, ge=1, description="independent random starts, batched; the lowest objective wins")
    first_restart: int = Field(
        0,
        ge=0,
        description="index of the first restart run: restarts first_restart .. first_restart + restarts - 1, each "
        "from its own fixed start (the saturation step adds restarts without rerunning the earlier ones)",
    )
    init: Literal["randn", "uniform", "zeros"] = Field("randn", description="dummy image initialisation")
    init_scale: float = Field(1.0, gt=0, description="std (randn) or half-range (uniform) of the init")
    loss: Literal["l2", "cosine", "l1", "layer-cosine"] = Field(
        "l2",
        description="gradient-matching distance "
        "(layer-cosine: mean over layers of 1 - cosine, blind to per-layer scale)",
    )
    optimizer: Literal["lbfgs", "adam", "sgd"] = Field("lbfgs", description="optimizer of the dummy data")
    lr: float = Field(1.0, gt=0, description="optimizer step size")
    regularizers: Regularizers = Field(
        default_factory=list,
        description="terms added to the objective, each with its weight, e.g. [{name: tv, weight: 0.03}]",
    )
    precision: Literal["float32", "float64"] = Field("float32", description="arithmetic of the attack")
    deterministic: bool = Field(False, description="use deterministic kernels (slower on GPU)")
    # What of the observed update is matched: the adaptive attacks set these from a defense's public mechanism.
    match_entries: Literal["all", "nonzero", "above-threshold"] = Field(
        "all",
        description="entries of the observed update that are matched: all; nonzero (a pruned update's survivors); "
        "above-threshold (|entry| > match_threshold, e.g. gradient dropout's kept entries above its noise)",
    )
    match_threshold: float = Field(0.0, ge=0, description="with match_entries: above-threshold, in gradient units")
    observed_scale: float = Field(
        1.0,
        gt=0,
        description="factor applied to the observed update before matching (gradient dropout's p undoes its 1/p)",
    )
    exclude_layers: list[str] = Field(
        default_factory=list,
        description="parameters left out of the matching (names, or module names for all of theirs)",
    )
    pdp_kappa: float | None = Field(
        None, ge=0, description="simulate PDP-SGD's penalty kappa * sum W^2 x^2 in the client's local steps (PDP-SGD)"
    )
    per_sample_clip: float | None = Field(
        None, gt=0, description="simulate DP-SGD's per-sample clipping to this norm in the client's local steps"
    )
    noise_sigma: float | None = Field(
        None,
        gt=0,
        description="l2/l1 distance divided by (matched entries * noise_sigma^2): the noise energy is its unit",
    )
    log_every: int = Field(0, ge=0, description="keep a trajectory point every N iterations (0 = none)")
    time_limit: float | None = Field(
        None,
        gt=0,
        description="seconds per attack job; past it the best reconstruction so far is scored, marked `cut` "
        "(cut before its first iteration: status `no-iterations`, not scored)",
    )

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if not cls.__dict__.get("field_defaults"):
            return
        for key, value in cls.field_defaults.items():
            field = copy.copy(cls.model_fields[key])
            if isinstance(value, list):
                field.default, field.default_factory = PydanticUndefined, (lambda value=value: copy.deepcopy(value))
                field.validate_default = True  # entries given as plain mappings become their config models
            else:
                field.default = value
            cls.__pydantic_fields__[key] = field
        cls.model_rebuild(force=True)

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        # Configs written by older versions hold every unset option as null ("the attack's default").
        if isinstance(data, dict) and any(value is None for value in data.values()):
            data = {key: value for key, value in data.items() if value is not None or _nullable(cls, key)}
        return data

    @field_validator("regularizers", mode="before")
    @classmethod
    def _regularizer_shorthand(cls, value: Any) -> Any:
        # `regularizers: [tv]` is not allowed (a term needs its weight); strings become {name: ...} so that
        # the error says which key is missing.
        return (
            [{"name": item} if isinstance(item, str) else item for item in value] if isinstance(value, list) else value
        )

    def weight_of(self, term: str) -> float:
        """The weight of regularizer ``term`` (0.0 when the attack does not use it)."""
        return sum(float(entry.weight) for entry in self.regularizers if entry.name == term)

    @property
    def tv_weight(self) -> float:
        """The total-variation weight (read-only; configs write ``regularizers: [{name: tv, weight: ...}]``)."""
        return self.weight_of("tv")

    @property
    def bn_weight(self) -> float:
        """The BatchNorm-statistics weight (read-only; ``regularizers: [{name: bn_statistics, weight: ...}]``)."""
        return self.weight_of("bn_statistics")

    def gradient_match(
        self,
        dummy: list[torch.Tensor],
        observed: list[torch.Tensor],
        masks: list[torch.Tensor],
        scale_free: bool,
    ) -> torch.Tensor:
        """The data term of one problem: the distance between the dummy's update and the observed one (scaled by
        ``observed_scale``), both restricted to the matched entries (``masks``, empty: every entry).

        Adaptive attacks that model a defense by a likelihood (Gradient Dropout, pruning) override it; it runs
        inside ``torch.func`` transforms, so it is a pure function of tensors without data-dependent branches."""
        if masks:
            dummy = [u * m for u, m in zip(dummy, masks, strict=True)]
            observed = [o * m for o, m in zip(observed, masks, strict=True)]
        value = gradient_distance(dummy, observed, str(self.loss), scale_free)
        sigma = self.noise_sigma
        if sigma is not None and self.loss in ("l2", "l1"):
            entries = sum(m.sum() for m in masks) if masks else float(sum(o.numel() for o in observed))
            value = value / (entries * float(sigma) ** 2)
        return value

    def restart_ids(self) -> list[int]:
        """The restarts this run solves: ``first_restart`` .. ``first_restart + restarts - 1``."""
        return list(range(self.first_restart, self.first_restart + self.restarts))


#: keys of the one flat option model older versions had; their null (unset) is dropped on every attack
RETIRED_KEYS = ("tv_weight", "bn_weight")


def _nullable(model: type[Any], key: str) -> bool:
    """Whether ``key: null`` means something for ``model`` (else it is an old dump's "default" and dropped)."""
    field = model.model_fields.get(key)
    if field is None:
        return key not in RETIRED_KEYS  # an unknown key stays, to be reported
    return field.default is None and field.default_factory is None


__all__ = ["AttackOptions", "OptimizationOptions", "Preset", "RegularizerConfig", "split_preset"]
