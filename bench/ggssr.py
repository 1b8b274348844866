"""GGSS-R (paper 002) against Inverting Gradients, its noise-aware ``ig-noise``, DLG and the prior's unguided samples
under gradient noise.

Victims: digits TRAINING images (what clients hold), indices 100 on; the prior is trained by `fedsim prior
train` on the digits TEST split (recorded in its fedsim_prior.json and checked here), so it never saw a
victim. It knows the digits distribution, unlike paper 002's FFHQ prior: an upper bound for a prior from
another distribution. Model: fedsim's `cnn` at 8 px (a fresh initialisation per seed), one SGD step with lr 1
on the victim images (the update is the gradient); noise is added to the update with per-entry std
``scale * RMS(clean update)`` (Gaussian, or Laplace with the same std). Every attack gets one restart.
``ig-noise`` is told the noise as a client defense would publish it: its distribution and its std, which the
attacker estimates from what it sees (the observed update's RMS and the public ``scale``, never the clean
update); without noise it has nothing to adapt to and does not run ("-").

Each seed initialises its own model and attacks its own victim images (images nested in seeds), so the 95 %
intervals resample both: the seeds, then the images within each drawn seed (``summaries.nested_median``).

Attack settings: ``--tune [ATTACK ...]`` runs the small grid that chose them (every attack's, or the named
ones': ggssr, ig, ig-noise, dlg), on training images 0-3 (never reported) at noise scales 1 and 10; the
constants below are its pick (see TUNED).

    python -m bench.ggssr --quick     # trains the CPU prior if absent (~5 min alone), then ~10 min on two cores
    python -m bench.ggssr             # Gaussian and Laplace noise, single images and batches of 4 (long)
    python -m bench.ggssr --tune      # the tuning grid (~20 min)

The last line is JSON: {"noise": [...], "ggssr_psnr": [...], "ig_psnr": [...], "ig_noise_psnr": [...],
"dlg_psnr": [...], "unguided_psnr": [...]} for Gaussian noise on single images (medians over images and seeds,
null where an attack did not run), each with its "<attack>_interval" (95 % two-stage bootstrap); the full mode
adds "settings" with every distribution and batch size.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from adversary.attacks.ggssr import guided_sample
from adversary.inversion import AttackOptions, run_attack
from adversary.inversion.adaptive import AdaptiveOptions
from adversary.inversion.requirements import AttackSetting, DefenseInForce
from adversary.priors import PRIORS
from adversary.view import AttackerView, LocalTraining
from bench.common import paired_psnrs
from clients.training import train_locally
from fedsim.config import ClientConfig, DataConfig, ModelConfig
from fedsim.data import load_dataset
from fedsim.judge.scoring import PSNR_CAP_DB
from fedsim.models import build_model
from fedsim.reporting import summaries
from fedsim.reporting.summaries import Estimate

CPU = torch.device("cpu")
DEFAULT_PRIOR = Path.home() / ".cache" / "fedsim" / "priors" / "digits-8-cpu"
REPORTED = 100  # first reported training index; 0-3 are the tuning images
TUNING = range(0, 4)
# The --tune pick (mean PSNR over noise scales 1 and 10 on the tuning images): guidance rate 0.4 with 50 DDIM
# steps (26.6 / 19.7 dB; paper 002's 0.2: 22.7 / 19.7), IG 300 iterations (150 and 600 within 0.5 dB),
# DLG 100 L-BFGS iterations (30: 2 dB lower at scale 1).
TUNED = {"guidance_rate": 0.4, "steps": 50, "ig_iterations": 300, "dlg_iterations": 100}
# ig-noise's pick (`--tune ig-noise`, TV weight in units of the noise energy x iterations): TV 1e-3 with 1000
# iterations (33.3 / 15.3 dB; 300 iterations 33.7 / 13.3; TV 1e-4 34.5 / 12.5; 1e-2 and above fall to a flat
# image at scale 10, 8 dB; its default TV 1.0, tuned on CIFAR-10 at sigma 0.01, gave a flat image at both on
# tuning image 0).
TUNED_IG_NOISE = {"ig_noise_tv": 1e-3, "ig_noise_iterations": 1000}
TUNE_IG_NOISE = {"tv": (1e-4, 1e-3, 1e-2, 1e-1), "iterations": (300, 1000)}


def noisy_view(model, x, y, scale: float, distribution: str, seed: int) -> AttackerView:
    global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    client = copy.deepcopy(model)
    train_locally(client, x, y, np.arange(len(x)), ClientConfig(lr=1.0, batch_size=len(x), local_steps=1), seed=0)
    observed = {k: v.detach().clone() for k, v in client.state_dict().items()}
    names = [n for n, _ in model.named_parameters()]
    deltas = torch.cat([(observed[n] - global_state[n]).reshape(-1) for n in names])
    std = scale * float(deltas.pow(2).mean().sqrt())
    generator = torch.Generator().manual_seed(10_000 + seed)
    for n in names:
        if std > 0:
            shape = observed[n].shape
            if distribution == "gaussian":
                noise = torch.randn(shape, generator=generator) * std
            else:  # Laplace with the same std: b = std / sqrt(2)
                u = torch.rand(shape, generator=generator) - 0.5
                noise = -std / math.sqrt(2) * torch.sign(u) * torch.log1p(-2 * u.abs())
            observed[n] = observed[n] + noise
    return AttackerView(
        round=1,
        tap="mitm",
        target="client:0",
        model=model,
        global_state=global_state,
        observed_state=observed,
        input_shape=tuple(x.shape[1:]),
        num_classes=10,
        num_samples=len(x),
        local_training=LocalTraining(lr=1.0, local_steps=1, batch_size=len(x)),
        input_bounds=(torch.zeros(x.shape[1]), torch.ones(x.shape[1])),
    )


def estimated_noise_std(view: AttackerView, scale: float) -> float:
    """The noise's per-entry std as the attacker estimates it: the observed update's mean square is the clean
    one's plus the noise's, and the noise's std is ``scale`` times the clean RMS, so
    std = RMS(observed) * scale / sqrt(1 + scale^2). Only what the attacker sees and the public scale."""
    observed = torch.cat([delta.reshape(-1) for delta in view.parameter_delta().values()])
    return float(observed.pow(2).mean().sqrt()) * scale / math.sqrt(1.0 + scale**2)


def noise_in_force(view: AttackerView, scale: float, distribution: str) -> AttackSetting:
    """The run as an adaptive attack sees it: the ``noise`` defense with the estimated std (Laplace noise is
    published by its scale b = std / sqrt(2), as the ``noise`` defense takes it); none without noise."""
    defenses = ()
    if scale > 0:
        std = estimated_noise_std(view, scale)
        options = (
            {"sigma": std} if distribution == "gaussian" else {"sigma": std / math.sqrt(2), "distribution": "laplace"}
        )
        defenses = (DefenseInForce("noise", options),)
    return AttackSetting(
        model=view.model,
        model_name="cnn",
        input_shape=view.input_shape,
        num_classes=view.num_classes,
        defenses=defenses,
    )


def ensure_prior(folder: Path) -> dict:
    if not (folder / "unet").is_dir() or not (folder / "fedsim_prior.json").exists():
        print(f"training the CPU digits prior into {folder} (resumable)", file=sys.stderr)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "fedsim.cli",
                "prior",
                "train",
                "--dataset",
                "digits",
                "--image-size",
                "8",
                "--preset",
                "cpu",
                "--resume",
                "--out",
                str(folder),
            ],
            check=True,
        )
    record = json.loads((folder / "fedsim_prior.json").read_text())
    if record.get("trained_steps", 0) < record["steps"]:
        raise SystemExit(
            f"{folder}: training stopped at {record.get('trained_steps')} of {record['steps']} steps; "
            "rerun `fedsim prior train --resume --out` on it"
        )
    return record


def prior_quality(folder: Path, data) -> str:
    """Unguided samples against real digits: mean RMS distance to the nearest training-split digit (no image the
    prior saw), for 64 samples, 64 held-out real digits and 64 noise images of the digits' mean and std."""
    prior = PRIORS.config("diffusers")(path=str(folder), offline=True).load((1, 8, 8), CPU, torch.float32)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        x0 = guided_sample(prior, None, torch.randn(64, 1, 8, 8, generator=generator), 50, 0.0, generator)
    reference = torch.from_numpy(data.x_train).reshape(len(data.x_train), -1).double()
    noise = (reference.mean() + reference.std() * torch.randn(64, 64, generator=generator, dtype=torch.float64)).clamp(
        0, 1
    )
    candidates = {
        "prior samples": ((x0.clamp(-1, 1) + 1) / 2).reshape(64, -1).double(),
        "held-out digits": torch.from_numpy(data.x_test[:64]).reshape(64, -1).double(),
        "noise": noise,
    }
    return ", ".join(
        f"{name} {float(torch.cdist(q, reference).min(1).values.mean() / 8):.3f}" for name, q in candidates.items()
    )


def ig_noise(tv: float, iterations: int) -> AttackOptions:
    return AttackOptions(name="ig-noise", iterations=iterations, regularizers=[{"name": "tv", "weight": tv}])


def attacks_for(
    prior: dict,
    guidance_rate: float,
    steps: int,
    ig_iterations: int,
    dlg_iterations: int,
    ig_noise_tv: float,
    ig_noise_iterations: int,
) -> dict:
    return {
        "ggssr": AttackOptions(name="ggssr", steps=steps, guidance_rate=guidance_rate, prior=prior),
        "unguided": AttackOptions(name="ggssr", steps=steps, guidance_rate=0.0, prior=prior),
        "ig": AttackOptions(name="ig", iterations=ig_iterations),
        "ig_noise": ig_noise(ig_noise_tv, ig_noise_iterations),
        "dlg": AttackOptions(name="dlg", iterations=dlg_iterations),
    }


def nested_victims(first: int, batch: int, images: int, seeds: int) -> list[list[int]]:
    """First training index of each victim batch, per seed: seed s attacks images no other seed attacks."""
    return [[first + batch * (seed * images + i) for i in range(images)] for seed in range(seeds)]


def measure(
    data, attacks: dict, scales, distribution: str, batch: int, victims: list[list[int]]
) -> dict[str, list[list[list[float]]]]:
    """PSNR per attack, per scale, per seed, per victim image (dB; inf: exact); ``victims[seed]`` lists the first
    training index of each of that seed's batches (consecutive images). An adaptive attack is adapted to the
    noise in force and left out where it refuses (no noise). Summarise a scale's seeds with :func:`median_psnr`."""
    out = {name: [[[] for _ in victims] for _ in scales] for name in attacks}
    for s, scale in enumerate(scales):
        for seed, indices in enumerate(victims):
            model = build_model(ModelConfig(name="cnn"), 1, 10, 8, seed)
            for first in indices:
                x = torch.from_numpy(data.x_train[first : first + batch])
                y = torch.from_numpy(data.y_train[first : first + batch])
                view = noisy_view(model, x, y, scale, distribution, seed * 1000 + first)
                for name, options in attacks.items():
                    if isinstance(options, AdaptiveOptions):
                        setting = noise_in_force(view, scale, distribution)
                        if options.refusal(setting) is not None:
                            continue
                        options = options.adapted(setting)
                    rec = run_attack(options, [view], seed=seed, device=CPU)[0]
                    out[name][s][seed].extend(paired_psnrs(rec.images, x))
    return out


def median_psnr(per_seed: list[list[float]]) -> Estimate:
    """Median PSNR over every image of every seed; its interval resamples the seeds and the images within each
    drawn seed (``fedsim.reporting.summaries.nested_median``): images are nested in seeds."""
    return summaries.nested_median(per_seed, cap=PSNR_CAP_DB)


TUNING_SCALES = (1.0, 10.0)


def tuning_grid(prior: dict) -> dict[str, dict[str, AttackOptions]]:
    """Per attack, the settings ``--tune`` tries, by label."""
    return {
        "ggssr": {
            f"rate {rate} steps {steps}": AttackOptions(name="ggssr", steps=steps, guidance_rate=rate, prior=prior)
            for rate in (0.1, 0.2, 0.4)
            for steps in (50, 100)
        },
        "ig": {f"iterations {n}": AttackOptions(name="ig", iterations=n) for n in (150, 300, 600)},
        "ig-noise": {
            f"tv {tv:g} iterations {n}": ig_noise(tv, n)
            for tv in TUNE_IG_NOISE["tv"]
            for n in TUNE_IG_NOISE["iterations"]
        },
        "dlg": {f"iterations {n}": AttackOptions(name="dlg", iterations=n) for n in (30, 100)},
    }


def best_setting(scores: dict[str, float]) -> str:
    """The label with the highest score (mean of the medians over the tuning scales); the first of equals."""
    return max(scores, key=lambda label: scores[label])


def tune(data, prior: dict, attacks: list[str]) -> dict[str, str]:
    """The grid that chose TUNED, on training images 0-3 (not reported), noise scales 1 and 10, two seeds;
    per attack, prints every setting's median PSNR and the pick, and returns the picks."""
    victims = [list(TUNING)] * 2
    picks = {}
    for name, candidates in tuning_grid(prior).items():
        if name not in attacks:
            continue
        scores = {}
        for label, options in candidates.items():
            medians = []
            for scale in TUNING_SCALES:
                per_seed = measure(data, {name: options}, [scale], "gaussian", 1, victims)[name][0]
                median = median_psnr(per_seed)
                medians.append(median.value)
                print(
                    f"tune noise {scale:4}: {name} {label}  PSNR median {median.value:.2f}", file=sys.stderr, flush=True
                )
            scores[label] = float(np.mean(medians))
        picks[name] = best_setting(scores)
        print(
            f"tune pick {name}: {picks[name]} (mean of the medians at noise {', '.join(map(str, TUNING_SCALES))}: "
            f"{scores[picks[name]]:.2f} dB)",
            file=sys.stderr,
            flush=True,
        )
    return picks


def cell(estimate: Estimate) -> str:
    """``"28.61 [25.02, 31.40]"``, or "-" where the attack did not run."""
    return estimate.text(2) or "-"


COLUMNS = {"ggssr": "GGSS-R", "unguided": "unguided samples", "ig": "IG", "ig_noise": "ig-noise", "dlg": "DLG"}


def rounded(value: float) -> float | None:
    """Two decimals for the JSON line; None (null) for NaN, an attack that did not run."""
    return None if math.isnan(value) else round(value, 2)


def markdown_table(scales, medians: dict[str, list[Estimate]]) -> list[str]:
    """The results page's table: one row per noise scale, median PSNR [95 % interval] per attack."""
    lines = ["| noise scale | " + " | ".join(COLUMNS[name] for name in medians) + " |"]
    lines.append("|" + " --- |" * (len(medians) + 1))
    for s, scale in enumerate(scales):
        lines.append(f"| {scale:g} | " + " | ".join(cell(values[s]) for values in medians.values()) + " |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--tune",
        nargs="*",
        choices=["ggssr", "ig", "ig-noise", "dlg"],
        default=None,
        help="run the tuning grid (of every attack, or of those named) on training images 0-3 and stop",
    )
    parser.add_argument("--prior", type=Path, default=DEFAULT_PRIOR)
    parser.add_argument(
        "--scales", type=float, nargs="+", default=None, help="noise std relative to the RMS of the clean update"
    )
    parser.add_argument("--images", type=int, default=None, help="victim images (or batches) per seed")
    parser.add_argument("--seeds", type=int, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # the attacks are small: one thread is faster on a shared two-core machine
    record = ensure_prior(args.prior)
    assert record["split"] == "test", "the prior must be trained on the held-out split"
    data = load_dataset(DataConfig(dataset="digits", image_size=8), seed=0)
    prior = {"name": "diffusers", "path": str(args.prior), "offline": True}
    print(
        f"prior {args.prior}: {record['trained_steps']} steps in {record.get('training_seconds', '?')} s on "
        f"{record.get('threads', '?')} thread(s); nearest training digit (RMS): {prior_quality(args.prior, data)}",
        file=sys.stderr,
    )
    if args.tune is not None:
        tune(data, prior, args.tune or list(tuning_grid(prior)))
        return
    scales = args.scales or ([0.0, 1.0, 3.0, 10.0, 30.0] if args.quick else [0.0, 1.0, 3.0, 10.0, 30.0, 100.0])
    # as many attacks per scale as before, spread over more seeds: the intervals resample the seeds
    images, seeds = (2, 4) if args.quick else (4, 6)
    images, seeds = args.images or images, args.seeds or seeds
    settings = [("gaussian", 1)] if args.quick else [("gaussian", 1), ("laplace", 1), ("gaussian", 4), ("laplace", 4)]
    attacks = attacks_for(prior, **TUNED, **TUNED_IG_NOISE)
    summary: dict[str, dict[str, list]] = {}
    start = time.perf_counter()
    for distribution, batch in settings:
        victims = nested_victims(REPORTED, batch, images, seeds)
        values = measure(data, attacks, scales, distribution, batch, victims)
        key = f"{distribution}-batch{batch}"
        summary[key] = {"noise": scales}
        medians = {name: [median_psnr(per_seed) for per_seed in per_scale] for name, per_scale in values.items()}
        for name, estimates in medians.items():
            summary[key][f"{name}_psnr"] = [rounded(m.value) for m in estimates]
            summary[key][f"{name}_interval"] = [[rounded(m.low), rounded(m.high)] for m in estimates]
        print(
            f"{distribution}, batch {batch}: median PSNR (dB) [95 % two-stage bootstrap interval, seeds then images], "
            f"{seeds} seeds x {images} images = {seeds * images} per cell",
            file=sys.stderr,
        )
        print("\n".join(markdown_table(scales, medians)), file=sys.stderr, flush=True)
    print(f"{time.perf_counter() - start:.0f} s", file=sys.stderr)
    main_setting = summary["gaussian-batch1"]
    out = {"noise": scales}
    for name in attacks:
        out[f"{name}_psnr"] = main_setting[f"{name}_psnr"]
        out[f"{name}_interval"] = main_setting[f"{name}_interval"]
    if not args.quick:
        out["settings"] = summary
    print(json.dumps(out))


if __name__ == "__main__":
    main()
