"""What every benchmark shares: where the data and the repository are, per-image PSNR, running configs,
and writing a generated table into its docs page.

Data: the benchmarks read two arrays files, ``mnist_test.npz`` and ``cifar10_subset.npz``, from the folder
named by ``--data-dir DIR`` or, without the flag, by the ``FEDSIM_DATA`` environment variable. There is no
default: a benchmark that needs a file and has neither says so in one line and stops.

Summaries: every figure a benchmark prints comes from ``fedsim.reporting.summaries``, as the report's do:
PSNR by its median and the fractions of images at or above 30 and 40 dB, bounded scores (SSIM, fractions,
label accuracy) by their mean, each as ``value [low, high]``, a 95 % percentile bootstrap interval (images
resampled within each seed; values measured once per seed, by :func:`interval`, over the seeds). The
interval stays inside the metric's range; the module says why this bootstrap.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from fedsim.judge.floor import FLOOR_LEVEL
from fedsim.judge.matching import pair_by_mse
from fedsim.judge.metrics import psnr
from fedsim.judge.verdict import judge_cell
from fedsim.reporting import summaries
from fedsim.reporting.summaries import Estimate
from fedsim.reporting.tables import image_scores
from fedsim.rundir.reader import SELECTED_OVER, Run

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"

DATA_ENV = "FEDSIM_DATA"
MNIST = "mnist_test.npz"  # MNIST arrays x, y (the defense sweeps)
CIFAR = "cifar10_subset.npz"  # CIFAR-10 arrays x_train, y_train, x_test, y_test (the attack benchmarks)

#: generated table (its markers' name) -> the docs page that holds it between ``<!-- name:start -->`` and ``:end``
DOCS_PAGES: dict[str, Path] = {
    "defense-table": REPO / "docs" / "results" / "defenses.md",
    "paper-results": REPO / "docs" / "results" / "papers.md",
    "gradient-dropout-table": REPO / "docs" / "results" / "papers.md",
    "compare-table": REPO / "docs" / "results" / "aggregation.md",
    "malicious-table": REPO / "docs" / "results" / "aggregation.md",
    "closed-form-table": REPO / "docs" / "results" / "aggregation.md",
    "audit-table": REPO / "docs" / "results" / "privacy-audit.md",
}


# --- data ---------------------------------------------------------------------------------------------------------


def add_data_dir(parser: argparse.ArgumentParser) -> None:
    """The ``--data-dir DIR`` flag (default: ``$FEDSIM_DATA``); read it with :func:`data_file`."""
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help=f"folder holding {MNIST} and {CIFAR} (default: ${DATA_ENV})",
    )


def data_file(data_dir: Path | None, name: str) -> Path:
    """``data_dir / name`` (or ``$FEDSIM_DATA / name`` without a folder), resolved; a one-line exit if it is missing."""
    if data_dir is None:
        from_env = os.environ.get(DATA_ENV)
        if not from_env:
            raise SystemExit(
                f"{name}: give the folder that holds it with --data-dir DIR or the {DATA_ENV} environment variable"
            )
        data_dir, origin = Path(from_env), f"{DATA_ENV}={from_env}"
    else:
        origin = f"--data-dir {data_dir}"
    path = (data_dir / name).expanduser().resolve()
    if not path.is_file():
        raise SystemExit(f"{origin}: no {name} in that folder")
    return path


# --- statistics and metrics ---------------------------------------------------------------------------------------


def interval(values: Sequence[float]) -> Estimate:
    """The mean of one value per seed or repetition (test accuracy, its drop, a per-seed fraction) and its 95 %
    bootstrap interval over them: ``fedsim.reporting.summaries.mean`` with the seeds as the resampled units.

    Figures with images behind them are summarised over the images instead (``summaries.summarize_psnr``,
    ``summaries.mean`` with one stratum per seed). With one value there is no interval."""
    return summaries.mean([list(values)])


def format_interval(estimate: Estimate, digits: int) -> str:
    """``"value [low, high]"`` with ``digits`` decimals, or the value alone where there was no interval."""
    return estimate.text(digits)


def paired_psnrs(estimate: torch.Tensor, truth: torch.Tensor) -> list[float]:
    """PSNR (dB, [0, 1] images; +inf for an exact pair) of each image of ``truth`` (N, C, H, W), paired with its
    closest estimate: summarise them with ``summaries.summarize_psnr``.

    The estimate is clamped to [0, 1] and paired by MSE (``fedsim.judge.matching``); each pair's PSNR is
    ``fedsim.judge.metrics.psnr``, as the run's own scores are.
    """
    estimate = estimate.reshape(-1, *truth.shape[1:]).clamp(0, 1)
    rec, true = pair_by_mse(estimate, truth)
    return [float(value) for value in psnr(estimate[rec], truth[true]).tolist()]


def strongest_images(run: Run, per: str) -> dict[str, Any]:
    """One run's leakage, image by image: the strongest attack per target (``per="target"``) or per round and
    target (``"round"``), picked by SSIM against the ground truth (``Run.strongest``: an oracle), and each
    attack's own images beside it. Summarise a list of these, one per seed, with :func:`leakage_cells`."""
    best = run.strongest("ssim_mean", per=per)
    attacks = run.events("attack")
    ok = attacks[attacks["status"] == "ok"] if "status" in attacks else attacks
    return {
        "psnr": image_scores(best, "psnr"),
        "ssim": image_scores(best, "ssim"),
        "compared": [int(n) for n in best[SELECTED_OVER]],
        "alone": {attack: image_scores(rows, "ssim") for attack, rows in ok.groupby("attack")} if len(ok) else {},
        "winners": Counter(best["attack"]),
        "targets": len(best),
        **picked_verdicts(run),
        **_attacker_pick(run, per),
    }


def picked_verdicts(run: Run) -> dict[str, list]:
    """Each attacked update's verdict and floor, read from the attacker's pick (``Run.verdicts``): the numbers a
    cell's count and binomial test (``fedsim.judge.verdict.judge_cell``) are made of."""
    verdicts = run.verdicts()
    return {
        "floor": [float(v) for v in verdicts["floor_ssim"].dropna()],
        "verdicts": [str(v) for v in verdicts["verdict"]],
    }


def picked_psnr(attacks: Any, pick: Any) -> float:
    """The mean PSNR of the result a ``Run.verdicts`` row ``pick`` names (its attack, round and target), read from
    the run's ``attacks`` events: the verdict rows carry the pick's SSIM only."""
    rows = attacks[
        (attacks["attack"] == pick["attack"])
        & (attacks["round"] == pick["round"])
        & (attacks["target"] == pick["target"])
    ]
    return float(rows["psnr_mean"].iloc[0])


def _attacker_pick(run: Run, per: str) -> dict[str, Any]:
    """The attacker's own pick per target (``Run.attacker_pick``: ``adversary.ranking``, no ground truth):
    its images' PSNR and SSIM, the attacks picked and how many picks saturated."""
    pick = run.attacker_pick(per=per)
    saturation = pick.get("saturation", [])
    return {
        "pick_psnr": image_scores(pick, "psnr"),
        "pick_ssim": image_scores(pick, "ssim"),
        "pick_winners": Counter(pick["attack"]),
        "pick_saturated": [value == "saturated" for value in saturation],
    }


def leakage_cells(per_seed: Sequence[dict[str, Any]], level: float = FLOOR_LEVEL) -> dict[str, str]:
    """Table cells of :func:`strongest_images` over seeds (images resampled within each seed):

    ``ssim`` the strongest attack's mean SSIM [95 % interval], ``compared`` the N of "ground-truth selection over
    N attacks", ``alone`` each attack's own mean SSIM (strongest first), ``psnr`` the median PSNR (dB),
    ``at_30db`` and ``at_40db`` the fractions of images at or above 30 and 40 dB, ``won`` how many targets each
    attack won; the attacker's own pick (``adversary.ranking``): ``pick_ssim``, ``pick_psnr`` (median),
    ``pick_won`` and ``saturated`` (picks whose budget saturated, of all picks); ``floor`` the mean SSIM floor of
    the attacker's picks (what guesses from public data reach through the same selection) and ``leaking`` the
    cell's verdict: how many targets' picks beat that floor, of all, and the binomial test of that count
    (``judge_cell``, at ``level``)."""
    psnr = summaries.summarize_psnr([seed["psnr"] for seed in per_seed])
    alone: dict[str, list[list[float | None]]] = {}
    for seed in per_seed:
        for attack, values in seed["alone"].items():
            alone.setdefault(attack, []).append(values)
    own = {attack: summaries.mean(values).value for attack, values in alone.items()}
    compared = sorted({n for seed in per_seed for n in seed["compared"]})
    winners = sum((Counter(seed["winners"]) for seed in per_seed), Counter())
    floors = [value for seed in per_seed for value in seed.get("floor", [])]
    verdicts = [value for seed in per_seed for value in seed.get("verdicts", [])]
    picks = [seed for seed in per_seed if seed.get("pick_ssim")]
    saturated = [flag for seed in picks for flag in seed["pick_saturated"]]
    pick_winners = sum((Counter(seed["pick_winners"]) for seed in picks), Counter())
    return {
        # the attacker's own pick (no ground truth): empty where no row carries the attacker-side yardstick
        "pick_ssim": summaries.mean([seed["pick_ssim"] for seed in picks]).text(3) if picks else "-",
        "pick_psnr": summaries.summarize_psnr([seed["pick_psnr"] for seed in picks]).median.text(1) if picks else "-",
        "pick_won": ", ".join(f"`{a}` {n}" for a, n in pick_winners.most_common()) or "-",
        "saturated": f"{sum(saturated)}/{len(saturated)}" if saturated else "-",
        "ssim": summaries.mean([seed["ssim"] for seed in per_seed]).text(3),
        "compared": "-".join(str(n) for n in sorted({compared[0], compared[-1]})) if compared else "-",
        "alone": ", ".join(f"`{a}` {v:.3f}" for a, v in sorted(own.items(), key=lambda item: -item[1])),
        "psnr": psnr.median.text(1),
        "at_30db": psnr.at_least[30.0].text(2),
        "at_40db": psnr.at_least[40.0].text(2),
        "won": ", ".join(f"`{a}` {n}" for a, n in winners.most_common()),
        "floor": f"{np.mean(floors):.3f}" if floors else "-",
        "leaking": judge_cell(verdicts, level).text() if verdicts else "-",
    }


# --- running configs ----------------------------------------------------------------------------------------------


def set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    """``raw["a"]["b"] = value`` for ``key`` "a.b", creating the sections on the way (a ``--set`` on a raw config)."""
    node = raw
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def fedsim_sweep(raw: dict[str, Any], config: Path, out: Path, parallel: int) -> Path:
    """Write ``raw`` (a config with a ``sweep:`` section) to ``config`` and run or resume it with ``fedsim sweep``.

    Finished points under ``out`` are skipped, so a killed benchmark resumes and a larger grid adds only its
    new points. Returns ``out``.
    """
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    command = ["sweep", str(config), "--out", str(out), "--parallel", str(parallel), "--quiet"]
    subprocess.run([sys.executable, "-m", "fedsim.cli", *command], check=True, cwd=REPO)
    return out


# --- generated tables in the docs ---------------------------------------------------------------------------------


def add_docs_flag(parser: argparse.ArgumentParser, marker: str) -> None:
    """The ``--docs`` flag: write the benchmark's table into its page (:data:`DOCS_PAGES`)."""
    page = DOCS_PAGES[marker].relative_to(REPO)
    parser.add_argument("--docs", action="store_true", help=f"write the table into {page} between its {marker} markers")


def write_between_markers(page: Path, marker: str, lines: Sequence[str]) -> None:
    """Replace what lies between ``<!-- marker:start -->`` and ``<!-- marker:end -->`` in ``page`` by ``lines``."""
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    text = page.read_text() if page.is_file() else ""
    if start not in text or end not in text.split(start, 1)[1]:
        raise SystemExit(f"{page}: no {start} ... {end} markers to write between")
    head, rest = text.split(start, 1)
    page.write_text(head + "\n".join([start, *lines, end]) + rest.split(end, 1)[1])
