"""``fedsim list``: every registered plugin (data sets, models, strategies, DP mechanisms, defenses, attacks and
their presets, regularizers, priors) with its description, and the model diagnostics."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def _attack_table() -> Table:
    """Attacks with their threat model, the defenses they adapt to and what they require."""
    from adversary import ATTACKS

    table = Table(
        "name",
        "threat model",
        "adapts to",
        "requires",
        "description",
        title="attacks (adversary.attacks; `strongest` = every one whose requirements hold)",
        title_justify="left",
        box=None,
    )
    for name, help_text in ATTACKS.describe().items():
        options = ATTACKS.config(name)
        server = "malicious server" if options.threat_model == "malicious" else "honest server / wire"
        table.add_row(name, server, ", ".join(options.adapts_to) or "-", options.requires or "-", help_text)
    return table


def _preset_table() -> Table:
    """Every attack's presets: the published settings `strongest` runs beside the defaults, with their source."""
    from adversary import ATTACKS

    table = Table(
        "attack@preset",
        "settings",
        "source",
        title=escape(
            "attack presets (adversary.attacks: [dlg@paper-003] or {name: dlg, preset: paper-003}; "
            "`strongest` runs each beside the defaults)"
        ),
        title_justify="left",
        box=None,
    )
    for name in ATTACKS.names():
        for preset, settings in ATTACKS.config(name).presets.items():
            table.add_row(f"{name}@{preset}", settings.summary, settings.source)
    return table


def list_command(args: argparse.Namespace) -> int:
    from adversary import ATTACKS
    from adversary.inversion.regularizers import REGULARIZERS
    from adversary.priors import PRIORS
    from clients.defenses import DEFENSES
    from fedsim.data import DATASETS
    from fedsim.models import MODELS
    from strategies import STRATEGIES
    from strategies.dp import DP_MECHANISMS

    console = Console(width=160)
    registries = (
        ("data sets", DATASETS),
        ("models", MODELS),
        ("strategies", STRATEGIES),
        ("differential privacy (strategy.dp.kind)", DP_MECHANISMS),
        ("defenses (client.defenses)", DEFENSES),
        ("attacks", ATTACKS),
        ("regularizers (adversary.attacks[].regularizers)", REGULARIZERS),
        ("generative priors (the prior of ggssr; `fedsim prior train` makes one)", PRIORS),
    )
    for title, registry in registries:
        if registry is ATTACKS:
            console.print(_attack_table())
            console.print(_preset_table())
            continue
        table = Table("name", "description", title=title, title_justify="left", box=None)
        for name, help_text in registry.describe().items():
            table.add_row(registry.label(name), help_text)
        if registry is DEFENSES:  # defenses that are plain configuration, listed so that users find them
            table.add_row(
                "(client.local_steps)",
                "several local steps before sending (local aggregation, as in Data Reconstruction Attacks "
                "and Defenses: A Systematic Evaluation)",
            )
            table.add_row("(model.dropout)", "dropout in the model during local training")
        if not registry.names():
            table.add_row("(none yet)", "")
        console.print(table)
    table = Table("command", "description", title="model diagnostics", title_justify="left", box=None)
    table.add_row(
        "fedsim vulnerability CONFIG",
        "RV (Reconstruction Vulnerability, from Enhanced Privacy Leakage from Noise-Perturbed Gradients via "
        "Gradient-Guided Conditional Diffusion Models): Frobenius norm of d(parameter "
        "gradient)/d(input) of the run's initial model, from random orthogonal projections, with its standard "
        "error; larger = the update says more about the input",
    )
    console.print(table)
    return 0
