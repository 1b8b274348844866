"""Calibration of the verdict (``fedsim.judge.floor``, ``fedsim.judge.verdict``): how often guesses made without the
update are called ``leaks`` (the false-positive rate, which must stay at the level) and how often reconstructions that
do carry the images are (the power), each with its 95 % Clopper-Pearson interval.

Every "reconstruction" below is scored and judged the way a run records it: ``fedsim.judge.scoring`` pairs it with the
truth, the target's floor (``public_floor``, 256 draws per family, the run's defaults) gives its row, and
``fedsim.judge.verdict.judge_target`` reads the verdict from the rows of a target as the console table does.

Nulls (nothing from the update; each row's share must stay at or below 5 %):

- one random public image set (the attacker's pick of one attack);
- best of 4 / 7 random public sets, picked by SSIM against the truth (the oracle of a portfolio of 4 / 7 attacks,
  read against its best-of-N null), and picked by a yardstick that knows nothing (what the attacker's pick is when
  the update carries no information);
- the public class means of the target's own labels, and random public images of those classes (what labels read
  off a gradient give);
- a black and a grey image.

Power (the truth degraded; higher is better): Gaussian noise of several sigmas, clamped to [0, 1]; a Gaussian blur;
noise sigma 0.7 cleaned by the attacker's median filter (``adversary.postprocessing``), its null cleaned the same way.

Targets: random training batches of 1, 2 and 8 images of MNIST as the defense evaluation splits it (28 px, the 2,000
held-out digits public) and of the CIFAR-10 subset (its 846 test images public)::

    python -m bench.calibration --data-dir DIR [--targets N] [--docs]

Results are kept per (data, size) in ``--out`` (default ``bench-out/calibration``), so a killed run resumes where it
stopped; ``--docs`` writes the table into docs/explanation/verdict.md and the figure into docs/images.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from adversary.postprocessing import POSTPROCESSING
from adversary.view import Reconstruction
from bench.common import CIFAR, CONFIGS, MNIST, REPO, add_data_dir, data_file, write_between_markers
from fedsim.config import load_config
from fedsim.data import load_dataset
from fedsim.judge.floor import PublicSplit, public_floor
from fedsim.judge.metrics import Lpips
from fedsim.judge.scoring import score_reconstruction
from fedsim.judge.verdict import judge_cell, judge_target

SETS = {"MNIST": ("defense-evaluation.yaml", MNIST), "CIFAR-10": ("defense-comparison.yaml", CIFAR)}
SIZES = (1, 2, 8)
#: targets per data set and size: 200 where the verdict's calibration is checked (2 images), 100 beside it
DEFAULT_TARGETS = {1: 100, 2: 200, 8: 100}
NOISE_SIGMAS = (0.1, 0.3, 0.5)
MARKER = "verdict-calibration"
PAGE = REPO / "docs" / "explanation" / "verdict.md"
FIGURE = REPO / "docs" / "images" / "verdict-calibration.png"
NO_LPIPS = Lpips("off")

Guess = Callable[[torch.Tensor, torch.Tensor, np.random.Generator], torch.Tensor]


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def scored_row(
    images: torch.Tensor,
    truth: torch.Tensor,
    labels: torch.Tensor,
    floor_of: Callable[[str | None], object],
    *,
    match: float | None = None,
    postprocess: str | None = None,
) -> dict:
    """One attack row as the scorer writes it (``LeakageScorer.on_result``): scores, then the floor's fields."""
    reconstruction = Reconstruction(images, labels, 0.0, (0.0,), 1, 0.0, gradient_match=match, postprocess=postprocess)
    score = score_reconstruction(reconstruction, truth, labels, _identity, NO_LPIPS)
    floor = floor_of(postprocess)
    # the fields LeakageScorer.on_result adds beside the scores: the attacker's yardstick and its cleaning
    attacker = {"gradient_match": match, "postprocess": postprocess}
    return {"attack": "guess", "status": "ok", **attacker, **score.to_row(), **floor.to_row(score.ssim_mean)}  # type: ignore[attr-defined]


def _random_public(public: PublicSplit, count: int, rng: np.random.Generator) -> torch.Tensor:
    return public.images[torch.as_tensor(rng.choice(len(public.images), count, replace=count > len(public.images)))]


def _class_means(public: PublicSplit, labels: torch.Tensor) -> torch.Tensor:
    return torch.stack([public.class_mean(int(label)) for label in labels])


def _class_random(public: PublicSplit, labels: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    picks = [public.class_indices(int(label)) for label in labels]
    return public.images[torch.stack([pool[int(rng.integers(len(pool)))] for pool in picks])]


def _blur(images: torch.Tensor, sigma: float) -> torch.Tensor:
    radius = int(3 * sigma)
    offsets = torch.arange(-radius, radius + 1, dtype=torch.float32)
    kernel = torch.exp(-(offsets**2) / (2 * sigma**2))
    kernel = kernel / kernel.sum()
    channels = images.shape[1]
    padded = F.pad(images, (radius, radius, radius, radius), mode="replicate")
    rows = F.conv2d(padded, kernel.view(1, 1, 1, -1).repeat(channels, 1, 1, 1), groups=channels)
    return F.conv2d(rows, kernel.view(1, 1, -1, 1).repeat(channels, 1, 1, 1), groups=channels)


def _noisy(truth: torch.Tensor, sigma: float, rng: np.random.Generator) -> torch.Tensor:
    noise = torch.from_numpy(rng.normal(0.0, sigma, size=tuple(truth.shape)).astype(np.float32))
    return (truth + noise).clamp(0, 1)


def target_verdicts(truth: torch.Tensor, labels: torch.Tensor, public: PublicSplit, seed: int) -> dict[str, str]:
    """Every case's verdict on one target (case name -> ``leaks`` / ``at floor``)."""
    rng = np.random.default_rng(seed)
    count = len(truth)
    floors: dict[str | None, object] = {}

    def floor_of(postprocess: str | None) -> object:
        if postprocess not in floors:
            transform = POSTPROCESSING[postprocess] if postprocess else None
            floors[postprocess] = public_floor(truth, labels, public, count, seed, transform=transform)
        return floors[postprocess]

    def row(images: torch.Tensor, **kwargs) -> dict:
        return scored_row(images, truth, labels, floor_of, **kwargs)

    verdicts: dict[str, str] = {}

    def judge(name: str, rows: Sequence[dict], oracle: bool = False) -> None:
        judged = judge_target(rows)
        assert judged is not None
        verdicts[name] = judged.oracle_verdict if oracle else judged.verdict

    judge("random public", [row(_random_public(public, count, rng))])
    for n in (4, 7):
        guesses = [_random_public(public, count, rng) for _ in range(n)]
        judge(f"best of {n} public, oracle", [row(g) for g in guesses], oracle=True)
        # a yardstick that knows nothing of the images: random gradient matches
        judge(f"best of {n} public, attacker's pick", [row(g, match=float(rng.random())) for g in guesses])
    judge("class means of its labels", [row(_class_means(public, labels))])
    judge("public images of its classes", [row(_class_random(public, labels, rng))])
    judge("black image", [row(torch.zeros_like(truth))])
    judge("grey image", [row(torch.full_like(truth, 0.5))])
    for sigma in NOISE_SIGMAS:
        judge(f"truth + noise {sigma}", [row(_noisy(truth, sigma, rng))])
    judge("truth blurred (sigma 1)", [row(_blur(truth, 1.0))])
    noisy = _noisy(truth, 0.7, rng)
    judge("truth + noise 0.7", [row(noisy)])
    judge("truth + noise 0.7, median-cleaned", [row(POSTPROCESSING["median3"](noisy), postprocess="median3")])
    return verdicts


NULL_CASES = (
    "random public",
    "best of 4 public, oracle",
    "best of 4 public, attacker's pick",
    "best of 7 public, oracle",
    "best of 7 public, attacker's pick",
    "class means of its labels",
    "public images of its classes",
    "black image",
    "grey image",
)


def run_set(name: str, size: int, targets: int, data_dir: Path | None, out: Path) -> dict[str, list[str]]:
    """Every case's verdicts on ``targets`` random batches of ``size`` images (resumed from ``out`` if done)."""
    path = out / f"{name.replace('-', '').lower()}-{size}.json"
    if path.is_file():
        done = json.loads(path.read_text())
        if done["targets"] >= targets:
            return {case: verdicts[:targets] for case, verdicts in done["verdicts"].items()}
    config_name, file = SETS[name]
    config = load_config(CONFIGS / config_name, ["data.dataset=npz", f"data.path={data_file(data_dir, file)}"])
    dataset = load_dataset(config.data, config.seed)
    public = PublicSplit(torch.from_numpy(dataset.x_test), torch.from_numpy(dataset.y_test))
    rng = np.random.default_rng(size)
    found: dict[str, list[str]] = {}
    for target in range(targets):
        index = rng.choice(len(dataset.x_train), size, replace=False)
        truth, labels = torch.from_numpy(dataset.x_train[index]), torch.from_numpy(dataset.y_train[index])
        for case, verdict in target_verdicts(truth, labels, public, seed=1000 * size + target).items():
            found.setdefault(case, []).append(verdict)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"targets": targets, "verdicts": found}))
    return found


def table(results: dict[tuple[str, int], dict[str, list[str]]]) -> list[str]:
    """The calibration table: per case, the share called ``leaks`` [95 % interval] per data set and size."""
    keys = list(results)
    cases = list(next(iter(results.values())))
    lines = [
        "| case | " + " | ".join(f"{name}, {size}" for name, size in keys) + " |",
        "| --- | " + " | ".join("---" for _ in keys) + " |",
    ]
    for case in cases:
        cells = []
        for key in keys:
            cell = judge_cell(results[key][case])
            cells.append(f"{cell.leaking / cell.targets:.1%} [{cell.share_low:.1%}, {cell.share_high:.1%}]")
        kind = "null" if case in NULL_CASES else "power"
        lines.append(f"| {case} ({kind}) | " + " | ".join(cells) + " |")
    counts = ", ".join(f"{name} {size}: {len(next(iter(found.values())))}" for (name, size), found in results.items())
    lines.append("")
    lines.append(
        "Share of targets called `leaks`, with its 95 % Clopper-Pearson interval (columns: data, images per target; "
        f"random targets per column: {counts}); the level is 5 %."
    )
    return lines


def figure(results: dict[tuple[str, int], dict[str, list[str]]], path: Path) -> None:
    """False-positive rates (left) and power (right) per case and column, with their intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(next(iter(results.values())))
    groups = {"false-positive rate (nulls)": [c for c in cases if c in NULL_CASES]}
    groups["power"] = [c for c in cases if c not in NULL_CASES]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5), gridspec_kw={"width_ratios": [len(g) for g in groups.values()]})
    width = 0.8 / len(results)
    for ax, (title, members) in zip(axes, groups.items()):
        for k, (key, found) in enumerate(results.items()):
            cells = [judge_cell(found[c]) for c in members]
            share = np.array([c.leaking / c.targets for c in cells])
            low = share - np.array([c.share_low for c in cells])
            high = np.array([c.share_high for c in cells]) - share
            x = np.arange(len(members)) + (k - (len(results) - 1) / 2) * width
            ax.bar(x, share, width, yerr=[low, high], capsize=2, label=f"{key[0]}, {key[1]} image(s)")
        if "false" in title:
            ax.axhline(0.05, color="black", linestyle="--", linewidth=1, label="level 5 %")
            ax.set_ylim(0, 0.25)
        else:
            ax.set_ylim(0, 1.05)
        ax.set_xticks(np.arange(len(members)), members, rotation=35, ha="right", fontsize=8)
        ax.set_title(title)
        ax.set_ylabel("share called `leaks`")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.calibration", description=__doc__.split("\n\n")[0])
    add_data_dir(parser)
    parser.add_argument(
        "--targets",
        type=int,
        default=None,
        help="random targets per data set and size (default: 200 of 2 images, 100 else)",
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="images per target (1 2 8)")
    parser.add_argument("--out", type=Path, default=Path("bench-out/calibration"), help="results kept for resuming")
    parser.add_argument("--docs", action="store_true", help=f"write the table into {PAGE.relative_to(REPO)}")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results = {}
    for name in SETS:
        for size in args.sizes:
            targets = args.targets or DEFAULT_TARGETS.get(size, 100)
            results[(name, size)] = run_set(name, size, targets, args.data_dir, args.out)
            print(f"{name}, {size} image(s): {targets} targets done", flush=True)
    lines = table(results)
    print("\n".join(lines))
    if args.docs:
        write_between_markers(PAGE, MARKER, lines)
        figure(results, FIGURE)
        print(f"wrote {PAGE.relative_to(REPO)} and {FIGURE.relative_to(REPO)}")


if __name__ == "__main__":
    main()
