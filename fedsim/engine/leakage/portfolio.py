"""The attacks a run actually runs: each attack's requirements checked against the run, before it starts.

An attack the config names that cannot apply (``refusal``) stops the run in one line; under
``adversary.attacks: strongest`` it is left out instead, and the run records which attacks it kept (the
run's ``config.yaml`` lists them). Every kept attack is then ``adapted`` to the defenses in force (the
adaptive variants read the defenses' public options).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from torch import nn

from adversary.inversion.requirements import AttackSetting, DefenseInForce
from adversary.registry import ATTACKS
from clients.defenses.base import DefenseConfig
from fedsim.config import AdversaryConfig, ClientConfig
from fedsim.core.errors import ConfigError

logger = logging.getLogger("fedsim")


def attack_setting(
    adversary: AdversaryConfig,
    client: ClientConfig,
    model_name: str,
    secagg: bool,
    model: nn.Module,
    input_shape: tuple[int, int, int],
    num_classes: int,
) -> AttackSetting:
    """The run as the attacks' requirements see it: the agreed model (``model``, named ``model.name``), the
    defenses' public options, the threat model; ``secagg``: the strategy is SecAgg+."""
    return AttackSetting(
        model=model,
        model_name=model_name,
        input_shape=input_shape,
        num_classes=num_classes,
        defenses=tuple(DefenseInForce(d.name, d.model_dump(exclude={"name"})) for d in client.defenses),
        tap=adversary.tap,
        targets=adversary.targets,
        server=adversary.server,
        modification=adversary.modification.name if adversary.modification is not None else None,
        secagg=secagg,
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


def resolve_attacks(
    adversary: AdversaryConfig, defenses: Sequence[DefenseConfig], setting: AttackSetting
) -> AdversaryConfig:
    """``adversary`` with the attacks that apply to ``setting``, adapted to its defenses (ConfigError: a listed one
    cannot); ``defenses``: the client defenses in force (``client.defenses``)."""
    kept, left_out = [], []
    for index, options in enumerate(adversary.attacks):
        reason = options.refusal(setting)
        if reason is None:
            kept.append(options.adapted(setting))
        elif adversary.portfolio == "strongest":
            left_out.append(f"{options.label} ({reason})")
        else:
            raise ConfigError(f"adversary.attacks[{index}] = {options.name}: {reason}")
    warning = verdict_warning(adversary.model_copy(update={"attacks": kept}), defenses, setting)
    if warning is not None:
        logger.warning(warning)
    if left_out:
        logger.info("strongest: running %s; left out %s", ", ".join(o.label for o in kept), "; ".join(left_out))
    if adversary.attacks and not kept:
        raise ConfigError(f"adversary.attacks = strongest: no attack applies to this run ({'; '.join(left_out)})")
    return adversary.model_copy(update={"attacks": kept})


def verdict_warning(
    adversary: AdversaryConfig, defenses: Sequence[DefenseConfig], setting: AttackSetting | None = None
) -> str | None:
    """One line where the run's leakage under a client defense cannot be read as the defense's protection: no
    attack adapted to a defense in force runs, or `strongest` will not saturate (None where neither holds). With
    ``setting``, the adapted attacks it names are only those that apply there (no image attack for a text model).

    The report marks such leakage as a lower bound (rows' ``lower_bound``)."""
    attacks = adversary.attacks
    names = [defense.name for defense in defenses]
    if not attacks or not names:
        return None
    running = {defense for options in attacks for defense in options.adapts_to}
    gaps = []
    for defense in dict.fromkeys(names):
        if defense in running:
            continue
        # every attack registers its options model
        adaptive = [
            name
            for name in ATTACKS.names()
            if defense in ATTACKS.options(name).adapts_to
            and (setting is None or ATTACKS.options(name)(name=name).refusal(setting) is None)
        ]
        would = f"{', '.join(adaptive)} would apply" if adaptive else "fedsim has no attack adapted to it"
        gaps.append(f"{defense} ({would})")
    unsaturated = adversary.portfolio == "strongest" and not adversary.budget.saturate
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
