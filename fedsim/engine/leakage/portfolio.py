"""The attacks a run actually runs: each attack's requirements checked against the run, before it starts.

An attack the config names that cannot apply (``refusal``) stops the run in one line; under
``adversary.attacks: strongest`` it is left out instead, and the run records which attacks it kept (the
run's ``config.yaml`` lists them). Every kept attack is then ``adapted`` to the defenses in force (the
adaptive variants read the defenses' public options).
"""

from __future__ import annotations

import logging

from torch import nn

from adversary.inversion.requirements import AttackSetting, DefenseInForce
from adversary.registry import ATTACKS
from fedsim.config import ExperimentConfig
from fedsim.core.errors import ConfigError
from fedsim.data import ImageDataset, TextDataset
from fedsim.judge.metrics import Lpips
from strategies.secagg import SECAGG_STRATEGY

logger = logging.getLogger("fedsim")


def attack_setting(
    config: ExperimentConfig, model: nn.Module, input_shape: tuple[int, int, int], num_classes: int
) -> AttackSetting:
    """The run as the attacks' requirements see it: the agreed model, the defenses' public options, the threat model."""
    adversary, client = config.adversary, config.client
    return AttackSetting(
        model=model,
        model_name=config.model.name,
        input_shape=input_shape,
        num_classes=num_classes,
        defenses=tuple(DefenseInForce(d.name, d.model_dump(exclude={"name"})) for d in client.defenses),
        tap=adversary.tap,
        targets=adversary.targets,
        server=adversary.server,
        modification=adversary.modification.name if adversary.modification is not None else None,
        secagg=config.strategy.name == SECAGG_STRATEGY,
        knows_local_training=adversary.knows.local_training,
        knows_num_samples=adversary.knows.num_samples,
        knows_labels=adversary.knows.labels == "known",
        knows_bn_statistics=adversary.knows.bn_statistics,
        lr=client.lr if adversary.knows.local_training else None,
        local_steps=client.local_steps,
        batch_size=client.batch_size,
        optimizer=client.optimizer,
        weight_decay=client.weight_decay,
    )


def resolve_attacks(config: ExperimentConfig, setting: AttackSetting) -> ExperimentConfig:
    """``config`` with the attacks that apply to ``setting``, adapted to its defenses
    (ConfigError: a listed one cannot)."""
    adversary = config.adversary
    kept, left_out = [], []
    for index, options in enumerate(adversary.attacks):
        reason = options.refusal(setting)
        if reason is None:
            kept.append(options.adapted(setting))
        elif adversary.portfolio == "strongest":
            left_out.append(f"{options.label} ({reason})")
        else:
            raise ConfigError(f"adversary.attacks[{index}] = {options.name}: {reason}")
    warning = verdict_warning(config.model_copy(update={"adversary": adversary.model_copy(update={"attacks": kept})}))
    if warning is not None:
        logger.warning(warning)
    if left_out:
        logger.info("strongest: running %s; left out %s", ", ".join(o.label for o in kept), "; ".join(left_out))
    if adversary.attacks and not kept:
        raise ConfigError(f"adversary.attacks = strongest: no attack applies to this run ({'; '.join(left_out)})")
    resolved = adversary.model_copy(update={"attacks": kept})
    return config.model_copy(update={"adversary": resolved})


def with_attacks_resolved(
    config: ExperimentConfig, architecture: nn.Module | None, dataset: ImageDataset | TextDataset
) -> tuple[ExperimentConfig, Lpips | None]:
    """The run's config with the attacks that apply (``resolve_attacks``) and the LPIPS network that scores them;
    ``architecture``: the run's model (None where no attack is configured: the config is returned as it is).
    An attack that cannot apply, or ``adversary.lpips: required`` without its weights, is refused here, before
    the run directory exists."""
    if not config.adversary.attacks or architecture is None:
        return config, None
    shape = (dataset.channels, dataset.image_size, dataset.image_size)
    config = resolve_attacks(config, attack_setting(config, architecture, shape, dataset.num_classes))
    return config, Lpips(config.adversary.lpips)


def verdict_warning(config: ExperimentConfig) -> str | None:
    """One line where the run's leakage under a client defense cannot be read as the defense's protection: no
    attack adapted to a defense in force runs, or `strongest` will not saturate (None where neither holds).

    The report marks such leakage as a lower bound (rows' ``lower_bound``)."""
    attacks = config.adversary.attacks
    defenses = [defense.name for defense in config.client.defenses]
    if not attacks or not defenses:
        return None
    running = {defense for options in attacks for defense in options.adapts_to}
    gaps = []
    for defense in dict.fromkeys(defenses):
        if defense in running:
            continue
        adaptive = [name for name in ATTACKS.names() if defense in ATTACKS.config(name).adapts_to]
        would = f"{', '.join(adaptive)} would apply" if adaptive else "fedsim has no attack adapted to it"
        gaps.append(f"{defense} ({would})")
    unsaturated = config.adversary.portfolio == "strongest" and not config.adversary.budget.saturate
    if not gaps and not unsaturated:
        return None
    reasons = []
    if gaps:
        reasons.append(f"no attack adapted to client defense {'; '.join(gaps)} runs")
    if unsaturated:
        reasons.append("the portfolio does not saturate (adversary.budget.saturate: false)")
    advice = "add the adaptive attack to adversary.attacks, or use attacks: strongest" if gaps else ""
    return (
        f"warning: {' and '.join(reasons)}: the leakage measured is a lower bound, not evidence that the defense "
        f"protects{f' ({advice})' if advice else ''}"
    )
