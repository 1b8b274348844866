"""What every benchmark shares: where the data and the repository are, one interval, one PSNR, running configs,
and writing a generated table into its docs page.

Data: the benchmarks read two arrays files, ``mnist_test.npz`` and ``cifar10_subset.npz``, from the folder
named by ``--data-dir DIR`` or, without the flag, by the ``FEDSIM_DATA`` environment variable. There is no
default: a benchmark that needs a file and has neither says so in one line and stops.

Intervals: every figure reported as ``mean ± half-width`` is :func:`interval` over seeds (or repetitions),
so a half-width means the same thing in every table.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from scipy import stats

from adversary.matching import pair_by_mse
from adversary.metrics import psnr
from adversary.scoring import capped_psnr_mean

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"

DATA_ENV = "FEDSIM_DATA"
MNIST = "mnist_test.npz"  # MNIST arrays x, y (the defense sweeps)
CIFAR = "cifar10_subset.npz"  # CIFAR-10 arrays x_train, y_train, x_test, y_test (the attack benchmarks)

#: generated table (its markers' name) -> the docs page that holds it between ``<!-- name:start -->`` and ``:end``
DOCS_PAGES: dict[str, Path] = {
    "defense-table": REPO / "docs" / "results" / "defenses.md",
    "paper-results": REPO / "docs" / "results" / "papers.md",
    "compare-table": REPO / "docs" / "results" / "aggregation.md",
    "malicious-table": REPO / "docs" / "results" / "aggregation.md",
    "closed-form-table": REPO / "docs" / "results" / "aggregation.md",
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


def interval(values: Sequence[float]) -> tuple[float, float]:
    """Mean of ``values`` and the half-width of its 95 % Student-t confidence interval.

    The half-width is ``t(0.975, n - 1) * s / sqrt(n)`` with ``s`` the sample standard deviation (``ddof=1``):
    the interval for the mean over ``n`` seeds or repetitions, assuming their values are independent and
    roughly normal. With fewer than two values there is no spread to estimate and the half-width is ``nan``.
    """
    array = np.asarray(values, dtype=float)
    if len(array) < 2:
        return float(array.mean()), math.nan
    return float(array.mean()), float(stats.t.ppf(0.975, len(array) - 1) * array.std(ddof=1) / math.sqrt(len(array)))


def format_interval(mean_and_half: tuple[float, float], digits: int) -> str:
    """``"mean ± half"`` with ``digits`` decimals, or the mean alone where there was no interval (one value)."""
    mean, half = mean_and_half
    return f"{mean:.{digits}f}" if math.isnan(half) else f"{mean:.{digits}f} ± {half:.{digits}f}"


def paired_psnr(estimate: torch.Tensor, truth: torch.Tensor) -> float:
    """Mean PSNR (dB, [0, 1] images) over the images of ``truth`` (N, C, H, W), each paired with its closest estimate.

    The estimate is clamped to [0, 1] and paired by MSE (``adversary.matching``); each pair's PSNR is
    ``adversary.metrics.psnr`` capped at ``adversary.scoring.PSNR_CAP_DB``, as the run's own scores are.
    """
    estimate = estimate.reshape(-1, *truth.shape[1:]).clamp(0, 1)
    rec, true = pair_by_mse(estimate, truth)
    return float(capped_psnr_mean(psnr(estimate[rec], truth[true]).tolist()))


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
