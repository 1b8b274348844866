"""The report's gallery: every attacked target of every attacked round, originals over reconstructions, each with
its score, floor, p-value and verdict.

A card shows one target of one round (a client's update, or the aggregate): the grid the run saved for the result
the attacker itself would report (``fedsim.judge.verdict``: attacks built for a defense in force first, then the
lowest gradient match, ``adversary.ranking``), its median PSNR and mean SSIM over the images, LPIPS where it was
measured, the SSIM floor (the score above which it beats guesses made without the update at the test's level,
``fedsim.judge.floor``), its p-value and the target's verdict; then the oracle (the best SSIM against the ground
truth, which no attacker has) with its best-of-N floor, labelled an upper bound, and the other attacks' SSIM. The
cards carry the titles, as text at one size: the title band the run drew into each grid is cropped off where the
grid's geometry shows one (``fedsim.judge.images.grid_shape``), so that no title is scaled with its image.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fedsim.judge.floor import AT_FLOOR, LEAKS, UNKNOWN
from fedsim.judge.scoring import PSNR_CAP_DB
from fedsim.judge.verdict import TargetVerdict
from fedsim.reporting.render import Card, Gallery
from fedsim.reporting.tables import judged
from fedsim.rundir.layout import RECONSTRUCTIONS_DIR, grid_file
from fedsim.rundir.reader import Run

AGGREGATE = "aggregate"


@dataclass(frozen=True)
class RoundGallery:
    """The cards of one attacked round of one run: its clients in order, the aggregate last."""

    run: str
    round: int
    cards: tuple[Card, ...]
    verdicts: dict[str, str]  # every attacked target of the round -> its verdict, cards or not

    def text(self) -> str:
        """How many targets were attacked, how many leak, and which have no saved grid to show."""
        counts = [(verdict, list(self.verdicts.values()).count(verdict)) for verdict in (LEAKS, AT_FLOOR, UNKNOWN)]
        said = ", ".join(
            f"{count} {'without a floor' if verdict == UNKNOWN else verdict}" for verdict, count in counts if count
        )
        text = f"{len(self.verdicts)} target(s) attacked: {said}."
        shown = {card.tags["target"] for card in self.cards}
        missing = [target for target in self.verdicts if target not in shown]
        if missing:
            text += f" No saved grid for {', '.join(missing)}."
        return text

    def block(self) -> Gallery:
        return Gallery(self.cards, {"run": self.run, "round": str(self.round)})


def target_order(target: str) -> tuple[int, int]:
    """Clients by id, then the aggregate (and any other target name after them)."""
    if target.startswith("client:"):
        return (0, int(target.split(":", 1)[1]))
    return (1 if target == AGGREGATE else 2, 0)


def target_title(target: str) -> str:
    return f"client {target.split(':', 1)[1]}" if target.startswith("client:") else target


def psnr_text(psnr: float) -> str:
    return "exact" if psnr >= PSNR_CAP_DB else f"{psnr:.1f} dB"


def _ssim(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def score_lines(pick: pd.Series, others: pd.DataFrame, verdict: TargetVerdict) -> tuple[str, ...]:
    """A card's text under its title: the attacker's pick's score, floor, p-value and the target's verdict; the
    oracle with its own floor where several attacks ran; and each other attack on the target."""
    score = f"PSNR {psnr_text(pick['psnr'])}, SSIM {pick['ssim']:.3f}"
    if not math.isnan(pick["lpips"]):  # LPIPS only where its network's weights were there to measure it
        score += f", LPIPS {pick['lpips']:.3f}"
    if verdict.p_value is None:
        lines = [score, "no test recorded (older fedsim)"]
    else:
        lines = [score, f"floor SSIM {_ssim(verdict.floor)}, p {verdict.p_value:.3f}: {verdict.verdict}"]
    if verdict.candidates > 1:
        oracle_p = "—" if verdict.oracle_p_value is None else f"{verdict.oracle_p_value:.3f}"
        lines.append(
            f"oracle (upper bound, best of {verdict.candidates} by the truth): {verdict.oracle.get('attack')} "
            f"SSIM {verdict.oracle_ssim:.3f}, floor {_ssim(verdict.oracle_floor)}, p {oracle_p}"
        )
    for _, other in others.iterrows():
        lines.append(f"also {other['attack']}: SSIM {other['ssim']:.3f}")
    return tuple(lines)


def title_band(image: Path, images: float) -> int:
    """Height (px) of the title band the run drew above a grid of ``images`` pairs, 0 where it drew none or the
    grid's size does not match the geometry of ``fedsim.judge.images.save_grid`` (square images)."""
    from matplotlib import image as mpimg

    from fedsim.judge.images import MAX_COLUMNS, PAD, TITLE_BAND, grid_shape

    if math.isnan(images) or images < 1:
        return 0
    height, width = mpimg.imread(image).shape[:2]
    columns = min(int(images), MAX_COLUMNS)
    tile, remainder = divmod(width - PAD, columns)
    side = tile - PAD
    if remainder or side < 1:
        return 0
    untitled, _ = grid_shape(int(images), side, side, title=False)
    return TITLE_BAND if height == untitled + TITLE_BAND else 0


def card(run: Run, rows: pd.DataFrame, *, with_round: bool = False) -> Card | None:
    """One target's card from its attack results in one round (``tables.attack_results`` rows); None when the
    attacker's pick has no saved grid (``adversary.save_images: false``)."""
    verdict = judged(rows)
    if verdict is None:
        return None
    pick = rows[rows["attack"] == verdict.pick.get("attack")].iloc[0]
    server_round, target, attack = int(pick["round"]), str(pick["target"]), str(pick["attack"])
    path = run.path / RECONSTRUCTIONS_DIR / grid_file(server_round, target, attack)
    if not path.is_file():
        return None
    title = f"{target_title(target)}, {attack}" + (f", round {server_round}" if with_round else "")
    others = rows[rows["attack"] != attack].sort_values("ssim", ascending=False, kind="stable")
    return Card(
        image=path,
        title=title,
        lines=score_lines(pick, others, verdict),
        crop_top=title_band(path, pick.get("images", math.nan)),
        tags={"target": target, "round": str(server_round), "verdict": verdict.verdict},
    )


def round_galleries(run: Run, attacks: pd.DataFrame) -> list[RoundGallery]:
    """Per attacked round of ``run``, in order, a card for every attacked target with a saved grid."""
    own = attacks[attacks["run"] == run.name].dropna(subset=["ssim"]) if not attacks.empty else attacks
    galleries = []
    for server_round, in_round in own.groupby("round", sort=True):
        targets = sorted(in_round["target"].unique(), key=target_order)
        verdicts = {target: _verdict(in_round[in_round["target"] == target]) for target in targets}
        cards = [card(run, in_round[in_round["target"] == target]) for target in targets]
        galleries.append(RoundGallery(run.name, int(server_round), tuple(c for c in cards if c is not None), verdicts))
    return galleries


def _verdict(rows: pd.DataFrame) -> str:
    found = judged(rows)
    return UNKNOWN if found is None else found.verdict


def strongest_cards(run: Run, attacks: pd.DataFrame) -> list[Card]:
    """The run's strongest result on one client's update and on the aggregate (highest SSIM over every attack,
    round and target), as cards that name their round."""
    own = attacks[attacks["run"] == run.name].dropna(subset=["ssim"]) if not attacks.empty else attacks
    cards = []
    for kind in ("per-client", "aggregate"):
        rows = own[own["kind"] == kind] if not own.empty else own
        if rows.empty:
            continue
        best = rows.loc[rows["ssim"].idxmax()]
        same = rows[(rows["round"] == best["round"]) & (rows["target"] == best["target"])]
        found = card(run, same, with_round=True)
        if found is not None:
            cards.append(found)
    return cards
