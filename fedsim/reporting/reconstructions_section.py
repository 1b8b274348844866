"""The report's gallery section: per run, its strongest reconstructions and every attacked round's cards
(``fedsim.reporting.gallery``)."""

from __future__ import annotations

import pandas as pd

from fedsim.reporting import gallery, tables
from fedsim.reporting.render import Gallery, ReportSection, Text
from fedsim.rundir.sweep_reader import Sweep

RECONSTRUCTIONS_TITLE = "Reconstructions: every attacked client and the aggregate, per attacked round"


def reconstructions_sections(sweep: Sweep, attacks: pd.DataFrame) -> list[ReportSection]:
    """The gallery: per run, its strongest result on a client's update and on the aggregate first, then every
    attacked round with a card per attacked target (fedsim.reporting.gallery)."""
    intro = Text(
        "Originals (top row of each image) over their reconstructions (the row below), paired image by image. "
        "Per target, the attack with the best SSIM against the training images (a ground-truth selection, which "
        "no attacker can make; any other attack's SSIM is listed under it): its median PSNR and mean SSIM over "
        "the images, LPIPS where it was measured, the SSIM floor (what a guess from public data alone reaches on "
        "the same images) and the target's verdict, `leaks` (red edge) when some attack on it scored above its "
        "floor, `at floor` when none did (a failed attack, no evidence of protection)."
    )
    head = ReportSection(RECONSTRUCTIONS_TITLE, [intro])
    sections = [head]
    several = len(sweep.runs) > 1
    for name, run in sweep.runs.items():
        strongest = gallery.strongest_cards(run, attacks)
        rounds = gallery.round_galleries(run, attacks)
        if not rounds:
            continue
        label = f"`{name}`, defenses: {tables.defense_text(run.config)}"
        level = 3
        if several:
            sections.append(ReportSection(f"{name} ({tables.defense_text(run.config)})", [], level=3))
            level = 4
        else:
            head.blocks.append(Text(label + "."))
        if strongest:
            sections.append(
                ReportSection(
                    "Strongest results: on one client's update and on the aggregate",
                    [Gallery(tuple(strongest), {"run": name, "strongest": "true"})],
                    level=level,
                )
            )
        for one_round in rounds:
            blocks: list = [Text(one_round.text())] + ([one_round.block()] if one_round.cards else [])
            sections.append(ReportSection(f"Round {one_round.round}", blocks, level=level))
    if len(sections) == 1:
        head.blocks.append(Text("No reconstruction grid (no attack result, or `adversary.save_images: false`)."))
    return sections
