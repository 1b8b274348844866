"""Defenses at equal utility, on a model trained to its plateau: the strongest attack per defense and strength.

The protocol is paper 001's: a defense is judged by the strongest attack against it at a given utility loss, so
each defense is run at several strengths (``STRENGTHS``) and, for an accuracy budget (a drop of at most 1, 3 or 10
points), the strength that leaks least within it is what counts (``fedsim.reporting.equal_utility``). As in paper
001, every defense perturbs the gradient of each training step (FedSGD: one local step per round), and utility and
leakage are measured on models of the same training. Each phase is a resumable sweep (``fedsim sweep``) over every
defense and strength x seeds:

* **Utility phase** (``configs/defense-evaluation.yaml``, ``OUT/sweep``). MNIST's 10,000 arrays
  (``mnist_test.npz``) are split once, by a fixed seed, into a public set (``PUBLIC_IMAGES``), the clients'
  training images and a held-out test set (``TEST_IMAGES``). ``lenet-fc`` (DLG's tanh LeNet with a fully
  connected representation layer before the classifier, the kind of model Soteria defends) is pre-trained
  centrally on the public set (``model.checkpoint``: the threat model allows it, the initial model is public and
  so is the data it saw) to 95.8 %; ten clients of 600 images then train it, each sending one defended gradient
  of 64 images per round, until test accuracy stops improving (``federation.plateau``). Utility is the test
  accuracy at the plateau (the mean of the evaluations that no longer improved) and its drop against the
  undefended run of the same seed. Defenses in ``UTILITY_SKIPPED`` are left out, with the reason.
* **Leakage phase, early model** (``OUT/leakage``). The same federation from ``lenet-fc``'s own initialisation
  (no checkpoint), every client sending the gradient of 2 images (``LEAKAGE_CLIENT``), one round, clients 0 and 1
  attacked with ``attacks: strongest`` (every attack that applies, the adaptive ones tuned on public images of
  the setting, then the saturation step: ``LEAKAGE_ADVERSARY``); each defense at the utility phase's strength,
  DP-SGD at the noise multiplier its epsilon sets over the utility phase's rounds (``dpsgd_at_utility_noise``).
* **Leakage phase, trained model** (``OUT/trained-leakage-seed-S``). The same attack from the model the
  undefended utility run of seed S ended with (``trained_checkpoint``): it needs the utility phase first.

Per defense and strength: leakage is, per attacked client, the strongest attack there (``Run.strongest``: the best
SSIM against the ground truth, an oracle over the attacks), with the SSIM floor of that result (what a guess
from public data reaches) and its verdict (``leaks`` above the floor); the example-level epsilon (DP-SGD) of the
utility phase and, for Gradient Dropout, the share of the update's entries its adaptive attack matched
(``matched_fraction``).

Prints one line per defense and strength, then the equal-utility table; last line: JSON. ``--docs`` writes
both into ``docs/results/defenses.md`` and draws the frontier per defense.

    .venv/bin/python -m bench.defenses [--data-dir DIR] [--out DIR] [--parallel 2] [--seeds 2]
                                       [--phase all|utility|leakage|trained] [--table-only] [--docs]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import torch
import yaml

import fedsim
from adversary.verdict import judge_cell
from bench.common import (
    CONFIGS,
    DOCS_PAGES,
    MNIST,
    REPO,
    add_data_dir,
    add_docs_flag,
    data_file,
    fedsim_sweep,
    format_interval,
    interval,
    leakage_cells,
    picked_verdicts,
    strongest_images,
    write_between_markers,
)
from fedsim.config import parse_config
from fedsim.models import build_model
from fedsim.reporting import summaries
from fedsim.reporting.defense_curves import UNDEFENDED, DefensePoint, curves
from fedsim.reporting.equal_utility import BUDGETS, StrengthPoint, equal_utility, equal_utility_markdown
from fedsim.reporting.figures import defense_curves_figure
from fedsim.rundir.layout import CHECKPOINT_DIR, checkpoint_file

CONFIG = CONFIGS / "defense-evaluation.yaml"
MARKER = "defense-table"
FIGURE = REPO / "docs" / "images" / "defense-curves.png"  # the frontier per defense, drawn by --docs
EQUAL_UTILITY_MARKER = "equal-utility-table"
PUBLIC_IMAGES = 2000  # pre-training set: what the server may know before the federation starts
TEST_IMAGES = 2000  # held out for test accuracy; the clients hold the rest
SPLIT_SEED = 0
#: central SGD on the public set, the step size cut by 0.3 at half and three quarters of the steps, each batch
#: shifted by up to ``PRETRAIN_SHIFT`` pixels: 95.8 % on the test set, so that the federation still has to learn
#: (the undefended one gains about 1.5 points to its plateau)
PRETRAIN = {"steps": 1000, "batch_size": 64, "lr": 0.3}
PRETRAIN_SHIFT = 2
SOTERIA_LAYER = "representation"  # lenet-fc's fully connected representation layer, not its classifier

#: defense -> strength -> client.defenses; four or more strengths each, weakest first
STRENGTHS: dict[str, dict[str, list[dict]]] = {
    "dpsgd": {
        f"epsilon {e:g}": [{"name": "dpsgd", "target_epsilon": e, "max_grad_norm": 1.0}] for e in (1, 8, 50, 1000)
    },
    "noise": {f"sigma {s:g}": [{"name": "noise", "sigma": s}] for s in (0.003, 0.01, 0.03, 0.1)},
    "prune": {f"ratio {r:g}": [{"name": "prune", "ratio": r}] for r in (0.5, 0.9, 0.99, 0.999)},
    "clip": {f"max_norm {n:g}": [{"name": "clip", "max_norm": n}] for n in (1.0, 0.1, 0.03, 0.01)},
    "gradient_dropout": {
        f"p {p:g}, sigma {s:g}": [{"name": "gradient_dropout", "p": p, "sigma": s}]
        for p, s in ((0.8, 5e-3), (0.6, 5e-3), (0.4, 5e-3), (0.6, 5e-2))
    },
    # kappa = (lr sigma)^2: at the utility phase's lr of 0.5, sigma 1 already leaves the model at chance
    "pdpsgd": {f"sigma {s:g}": [{"name": "pdpsgd", "sigma": s}] for s in (0.003, 0.01, 0.03, 0.1)},
    "soteria": {
        f"ratio {r:g} of `{SOTERIA_LAYER}`": [{"name": "soteria", "ratio": r, "layer": SOTERIA_LAYER}]
        for r in (0.2, 0.5, 0.8, 0.95)
    },
}
#: label -> client.defenses: the undefended run and every defense at every strength
DEFENSES: dict[str, list[dict]] = {
    "none": [],
    **{f"{defense} {label}": settings for defense, levels in STRENGTHS.items() for label, settings in levels.items()},
}
#: defenses the utility phase leaves out, and why: their rows carry leakage only
UTILITY_SKIPPED: dict[str, str] = {
    "soteria": "its score needs each sample's Jacobian for each of the representation layer's 588 input units, "
    "about 20 s per round of 10 clients x 64 images on 2 CPU cores, so hours per run to a plateau",
}
#: the utility phase's settings: DEFENSES without UTILITY_SKIPPED
UTILITY_DEFENSES: dict[str, list[dict]] = {
    label: settings for label, settings in DEFENSES.items() if not any(d["name"] in UTILITY_SKIPPED for d in settings)
}
#: the settings of papers 000, 001 and 004 (configs/papers/) that DEFENSES lacks, run into the same sweeps by
#: bench.paper_results
PAPER_EXTRAS: dict[str, list[dict]] = {
    "clip-0.5": [{"name": "clip", "max_norm": 0.5}],
    "pdpsgd-1": [{"name": "pdpsgd", "sigma": 1.0}],
}


def settings_key(defenses: list) -> str:
    """A defense list as a comparable string (validated, so that defaults are filled alike)."""
    parsed = parse_config({"client": {"defenses": defenses}}).client.defenses
    return repr([d.model_dump() for d in parsed])


def images_of(x: np.ndarray) -> torch.Tensor:
    """(N, H, W) or (N, C, H, W) uint8 or [0, 1] arrays as float (N, C, H, W) in [0, 1], as fedsim loads them."""
    images = torch.as_tensor(np.asarray(x), dtype=torch.float32)
    images = images[:, None] if images.dim() == 3 else images
    return images / 255 if np.asarray(x).dtype == np.uint8 else images


def split_data(source: Path, out: Path) -> tuple[Path, Path]:
    """``source``'s x, y split once into a public set and the federation's training and test arrays."""
    public, federated = out / "public.npz", out / "federated.npz"
    if public.is_file() and federated.is_file():
        return federated, public
    arrays = np.load(source)
    x, y = arrays["x"], arrays["y"]
    order = np.random.default_rng(SPLIT_SEED).permutation(len(y))
    test, shared, private = (
        order[:TEST_IMAGES],
        order[TEST_IMAGES : TEST_IMAGES + PUBLIC_IMAGES],
        order[TEST_IMAGES + PUBLIC_IMAGES :],
    )
    out.mkdir(parents=True, exist_ok=True)
    np.savez(public, x=x[shared], y=y[shared])
    np.savez(federated, x_train=x[private], y_train=y[private], x_test=x[test], y_test=y[test])
    return federated, public


def pretrain(public: Path, federated: Path, model: dict, out: Path) -> Path:
    """Train ``model`` centrally on the public set and save its state_dict (once: an existing file is kept)."""
    path = out / "pretrained.pt"
    if path.is_file():
        return path
    config = parse_config({"model": model}).model
    network = build_model(config, in_channels=1, num_classes=10, image_size=28, seed=SPLIT_SEED)
    arrays = np.load(public)
    x, y = images_of(arrays["x"]), torch.as_tensor(arrays["y"]).long()
    generator = torch.Generator().manual_seed(SPLIT_SEED)
    steps = PRETRAIN["steps"]
    optimizer = torch.optim.SGD(network.parameters(), lr=PRETRAIN["lr"])
    schedule = torch.optim.lr_scheduler.MultiStepLR(optimizer, [steps // 2, 3 * steps // 4], gamma=0.3)
    network.train()
    for _ in range(steps):
        batch = torch.randint(len(y), (PRETRAIN["batch_size"],), generator=generator)
        shift = torch.randint(-PRETRAIN_SHIFT, PRETRAIN_SHIFT + 1, (2,), generator=generator).tolist()
        loss = torch.nn.functional.cross_entropy(network(torch.roll(x[batch], shift, dims=(2, 3))), y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    held_out = np.load(federated)
    network.eval()
    with torch.no_grad():
        predicted = network(images_of(held_out["x_test"])).argmax(dim=1)
    accuracy = float((predicted == torch.as_tensor(held_out["y_test"])).float().mean())
    print(f"pre-trained {config.name} on {len(y)} public images: test accuracy {100 * accuracy:.2f} %")
    torch.save(network.state_dict(), path)
    return path


def run_sweep(
    data: Path,
    out: Path,
    seeds: int,
    parallel: int,
    settings: dict[str, list[dict]] = UTILITY_DEFENSES,
    folder: str = "sweep",
) -> Path:
    """Run (or continue) the sweep of ``settings`` x seeds under ``out/folder``; finished points are skipped.
    Point folders are numbered in grid order, so other ``settings`` belong in another ``folder``."""
    raw = yaml.safe_load(CONFIG.read_text())
    federated, public = split_data(data, out)
    checkpoint = pretrain(public, federated, {k: v for k, v in raw["model"].items() if k != "checkpoint"}, out)
    raw["data"] = {**raw["data"], "dataset": "npz", "path": str(federated)}
    raw["model"] = {**raw["model"], "checkpoint": str(checkpoint)}
    # seeds outermost: a sweep stopped early has every setting at the first seeds rather than a few at all seeds
    raw["sweep"] = {"grid": {"seed": list(range(seeds)), "client.defenses": settings}}
    return fedsim_sweep(raw, out / f"{folder}-config.yaml", out / folder, parallel)


#: the leakage phases (paper 001's protocol: utility measured on the trained model, leakage on the early one; here
#: on the trained one as well): the utility phase's federation in which every client sends the gradient of 2
#: images (the attacker's best case: the fewest images per update), clients 0 and 1 attacked in round 1 with every
#: attack that applies, each defense at the same strength as in the utility phase
LEAKAGE_ROUNDS = 1
LEAKAGE_CLIENT = {"batch_size": 2}
LEAKAGE_ADVERSARY = {
    "tap": "mitm",
    "targets": "per-client",
    "rounds": [1],
    "clients": [0, 1],
    "knows": {"local_training": True, "num_samples": True, "labels": "inferred"},
    "attacks": "strongest",
    # ggssr joins only with a trained prior; ig-dip is left out at CPU scale (3-4x ig's cost per iteration and
    # weaker than ig on noise-free updates: python -m bench.dip), and so are the papers' presets (thousands of
    # iterations, several restarts each)
    "portfolio_exclude": [
        "ig-dip",
        "dlg@paper-003",
        "dlg@paper-003-aggregate",
        "ig@geiping-2020",
        "ig-clip@paper-001",
        "ig-dropout@paper-004",
        "ig-noise@paper-001",
        "ig-pdpsgd@paper-000",
        "ig-prune@paper-001",
        "ig-soteria@paper-001",
    ],
    "portfolio_options": {},  # each attack at its own defaults (dlg 300 L-BFGS iterations, ig 1,000 Adam steps)
    "budget": {"leaders": 1, "max_iterations": 2000, "max_restarts": 2, "max_seconds": 60},
    # the adaptive attacks tuned on public images of this setting (cached per setting, so once per strength)
    "tuning": {"select": "adaptive", "trials": 6, "max_iterations": 300},
    "save_images": True,
}
#: the trained model the second leakage phase starts from, per seed: the undefended utility run's last round
TRAINED_FOLDER = "trained-leakage"


def dpsgd_at_utility_noise(defenses: list[dict], sample_rate: float, steps: int) -> list[dict]:
    """``defenses`` with DP-SGD's ``target_epsilon`` replaced by the noise multiplier it sets over the utility
    phase's planned ``steps``: a one-round leakage run would otherwise calibrate its noise to one round's budget
    and add far less noise than the federation it stands for."""
    from clients.defenses.dpsgd import noise_for_budget

    out = []
    for defense in defenses:
        if defense["name"] == "dpsgd" and defense.get("target_epsilon") is not None:
            parsed = parse_config({"client": {"defenses": [defense]}}).client.defenses[0]
            multiplier = noise_for_budget(
                defense["target_epsilon"], parsed.delta, sample_rate, steps, parsed.accountant
            )
            defense = {k: v for k, v in defense.items() if k != "target_epsilon"} | {"noise_multiplier": multiplier}
        out.append(defense)
    return out


def leakage_defenses(federated: Path, settings: dict[str, list[dict]] = DEFENSES) -> dict[str, list[dict]]:
    """``settings`` as the leakage phase runs them (:func:`dpsgd_at_utility_noise`), for the utility phase's
    federation over the clients' arrays ``federated``."""
    raw = yaml.safe_load(CONFIG.read_text())
    clients, batch = raw["federation"]["num_clients"], raw["client"]["batch_size"]
    sample_rate = batch / (len(np.load(federated)["y_train"]) // clients)  # an iid partition's Poisson rate
    steps = raw["client"]["local_steps"] * raw["federation"]["rounds"]  # the most the utility phase plans
    return {label: dpsgd_at_utility_noise(defenses, sample_rate, steps) for label, defenses in settings.items()}


def leakage_config(federated: Path, settings: dict[str, list[dict]], checkpoint: Path | None) -> dict:
    """The leakage phase's config: the utility phase's with 2-image client updates, one round attacked by
    ``LEAKAGE_ADVERSARY``, from ``checkpoint`` (None: lenet-fc's own initialisation), a sweep over ``settings``."""
    raw = yaml.safe_load(CONFIG.read_text())
    raw["data"] = {**raw["data"], "dataset": "npz", "path": str(federated)}
    raw["model"] = {key: value for key, value in raw["model"].items() if key != "checkpoint"}
    if checkpoint is not None:
        raw["model"]["checkpoint"] = str(checkpoint)
    raw["federation"] = {**raw["federation"], "rounds": LEAKAGE_ROUNDS, "plateau": None, "target_accuracy": None}
    raw["client"] = {**raw["client"], **LEAKAGE_CLIENT}
    raw["adversary"] = dict(LEAKAGE_ADVERSARY)
    raw["sweep"] = {"grid": {"client.defenses": leakage_defenses(federated, settings)}}
    return raw


def run_leakage_sweep(
    data: Path,
    out: Path,
    seeds: int,
    parallel: int,
    settings: dict[str, list[dict]] = DEFENSES,
    folder: str = "leakage",
) -> Path:
    """The leakage phase on the early model: ``settings`` x seeds under ``out/folder`` (resumable, as
    :func:`run_sweep`)."""
    federated, _ = split_data(data, out)
    raw = leakage_config(federated, settings, checkpoint=None)
    raw["sweep"]["grid"] = {"seed": list(range(seeds)), **raw["sweep"]["grid"]}
    return fedsim_sweep(raw, out / f"{folder}-config.yaml", out / folder, parallel)


def trained_checkpoint(out: Path, seed: int, utility_folder: str = "sweep") -> Path | None:
    """The model the undefended utility run of ``seed`` ended with (at its plateau), or None before it finished."""
    undefended = {"none": DEFENSES["none"]}
    for row in collect(out / utility_folder, undefended, lambda run: {"path": last_checkpoint(run)})["none"]:
        if row["seed"] == seed:
            return row["path"] if row["path"].is_file() else None
    return None


def last_checkpoint(run: fedsim.rundir.reader.Run) -> Path:
    """Where a finished run keeps the model of its last round."""
    return run.path / CHECKPOINT_DIR / checkpoint_file(int(run.summary["rounds_completed"]))


def run_trained_leakage_sweep(
    out: Path,
    seeds: int,
    parallel: int,
    settings: dict[str, list[dict]] = DEFENSES,
    folder: str = TRAINED_FOLDER,
) -> list[Path]:
    """The leakage phase on the trained model: per seed, ``settings`` from the model its undefended utility run
    ended with, under ``out/folder-seed-S`` (one sweep per seed, as each seed has its own model); seeds whose
    undefended run has not finished are skipped."""
    done = []
    for seed in range(seeds):
        checkpoint = trained_checkpoint(out, seed)
        if checkpoint is None:
            print(f"trained-model leakage, seed {seed}: the undefended utility run has not finished; skipped")
            continue
        raw = leakage_config(out / "federated.npz", settings, checkpoint)
        raw["seed"] = seed
        sweep = out / f"{folder}-seed-{seed}"
        done.append(fedsim_sweep(raw, out / f"{folder}-seed-{seed}-config.yaml", sweep, parallel))
    return done


def leakage_run(run: fedsim.rundir.reader.Run) -> dict:
    """One leakage-phase run: the strongest attack per attacked client (``strongest_images``), the floor and
    verdict of each attacker's pick, and the share of entries Gradient Dropout's adaptive attack matched."""
    attacks = run.events("attack")
    return {
        "matched_fraction": attacks["matched_fraction"].dropna().tolist() if "matched_fraction" in attacks else [],
        **strongest_images(run, per="round"),
        **picked_verdicts(run),
    }


def plateau_accuracy(run: fedsim.rundir.reader.Run) -> tuple[float, bool]:
    """The test accuracy at the plateau (``fedsim.core.plateau``: the mean of the evaluations that no longer
    improved), and whether the plateau was reached (else: the final accuracy)."""
    plateau = (run.summary or {}).get("plateau")
    if plateau:
        return float(plateau["accuracy"]), True
    return float(run.events("eval").iloc[-1]["accuracy"]), False


def per_run(run: fedsim.rundir.reader.Run) -> dict:
    """One utility-phase run: its accuracy at the plateau, when it got there, and its privacy accounting."""
    accuracy, reached = plateau_accuracy(run)
    summary = run.summary or {}
    return {
        "accuracy": accuracy,
        "plateau_reached": reached,
        "plateau_round": (summary.get("plateau") or {}).get("round"),
        "rounds_to_target": summary.get("rounds_to_target"),
        "epsilon": summary.get("epsilon_example"),
        "epsilon_client": summary.get("epsilon_client"),
    }


def defense_of(label: str) -> tuple[str, str]:
    """(defense, strength) of a ``DEFENSES`` label."""
    for defense, levels in STRENGTHS.items():
        for strength in levels:
            if label == f"{defense} {strength}":
                return defense, strength
    return label, "-"


def summarize_label(rows: list[dict], leaks: list[dict], trained: list[dict], baseline: dict[int, float]) -> dict:
    """Cells of one defense at one strength over its seeds: utility from the utility phase's ``rows``, leakage
    on the early model from the leakage phase's ``leaks``, on the trained model from ``trained``."""
    drops = [100 * (baseline[r["seed"]] - r["accuracy"]) for r in rows if r["seed"] in baseline]
    epsilons = [r["epsilon"] for r in rows if r["epsilon"] is not None]
    floors = [value for r in leaks for value in r["floor"]]
    matched = [value for r in leaks for value in r["matched_fraction"]]
    trained_matched = [value for r in trained for value in r["matched_fraction"]]
    plateaus = [r["plateau_round"] for r in rows if r["plateau_reached"]]
    to_target = [r["rounds_to_target"] for r in rows if r["rounds_to_target"] is not None]
    trained_cells = leakage_cells(trained) if trained else {}
    return {
        "seeds": len(rows),
        "leakage_seeds": len(leaks),
        **(leakage_cells(leaks) if leaks else {}),
        "ssim_value": float(np.mean([v for r in leaks for v in r["ssim"] if v is not None])) if leaks else np.nan,
        "ssim_estimate": summaries.mean([r["ssim"] for r in leaks]) if leaks else None,
        "floor": float(np.mean(floors)) if floors else None,
        # every attacked update of every seed as one cell: leaking targets counted and tested (adversary.verdict)
        "verdict": judge_cell([v for r in leaks for v in r["verdicts"]]).text(),
        "trained_ssim": trained_cells.get("ssim", "-"),
        "trained_verdict": judge_cell([v for r in trained for v in r["verdicts"]]).text(),
        "trained_seeds": len(trained),
        "accuracy": interval([100 * r["accuracy"] for r in rows]) if rows else None,
        "drop": interval(drops) if drops else None,
        "plateau": f"{min(plateaus)}-{max(plateaus)}" if plateaus else "-",
        "unreached": sum(1 for r in rows if not r["plateau_reached"]),
        "to_target": f"{min(to_target)}-{max(to_target)}" if to_target else "-",
        "reached_target": len(to_target),
        "epsilon": max(epsilons) if epsilons else None,
        "matched": float(np.mean(matched)) if matched else None,
        "trained_matched": float(np.mean(trained_matched)) if trained_matched else None,
    }


def share(fraction: float | None) -> str:
    """A share of an update's entries as a percentage with enough digits for Gradient Dropout's few (- for none)."""
    return "-" if fraction is None else f"{100 * fraction:.2g} %"


def strength_lines(table: dict[str, dict]) -> list[str]:
    fmt = format_interval
    lines = [
        "| defense | strength | early model: SSIM, ground-truth selection over N attacks | N | floor (SSIM) | "
        "verdict | PSNR median (dB) | at >= 40 dB | won by (targets) | "
        "entries the adaptive attack matched (early, trained) | "
        "accuracy at plateau (%) | drop (points) | plateau round | rounds to 97 % | epsilon_example | "
        "trained model: SSIM (verdict) | seeds (utility, early, trained) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, row in table.items():
        defense, strength = defense_of(label)
        floor = f"{row['floor']:.3f}" if row["floor"] is not None else "-"
        plateau = row["plateau"] + (f" ({row['unreached']} not reached)" if row["unreached"] else "")
        to_target = row["to_target"] + (
            f" ({row['seeds'] - row['reached_target']} never)" if row["reached_target"] < row["seeds"] else ""
        )
        lines.append(
            f"| {defense} | {strength} | {row.get('ssim', '-')} | {row.get('compared', '-')} | {floor} | "
            f"{row['verdict']} | {row.get('psnr', '-')} | {row.get('at_40db', '-')} | {row.get('won', '-')} | "
            f"{share(row['matched'])}, {share(row['trained_matched'])} | "
            f"{fmt(row['accuracy'], 2) if row['accuracy'] else '-'} | "
            f"{fmt(row['drop'], 2) if row['drop'] else '-'} | {plateau} | {to_target} | "
            f"{'-' if row['epsilon'] is None else format(row['epsilon'], '.2f')} | "
            f"{row['trained_ssim']} ({row['trained_verdict']}) | {row['seeds']}, {row['leakage_seeds']}, "
            f"{row['trained_seeds']} |"
        )
    return lines


def equal_utility_points(table: dict[str, dict]) -> list[StrengthPoint]:
    """Each defended strength with both phases measured: its drop (utility phase) and leakage (leakage phase)."""
    points = []
    for label, row in table.items():
        defense, strength = defense_of(label)
        if label == "none" or row["drop"] is None or row["floor"] is None or not row["leakage_seeds"]:
            continue
        points.append(
            StrengthPoint(
                defense=defense,
                setting=strength,
                drop=row["drop"].value,
                leakage=row["ssim_value"],
                leakage_text=row["ssim"],
                floor=row["floor"],
                verdict=row["verdict"],
            )
        )
    return points


def curve_points(table: dict[str, dict]) -> list[DefensePoint]:
    """Each strength with both phases measured, as points of ``fedsim.reporting.defense_curves`` (one curve per
    defense; the undefended point at no drop): the drop over the seeds, the leakage over the images of every
    seed, both with their 95 % bootstrap intervals."""
    points = []
    for label, row in table.items():
        defense, strength = defense_of(label)
        undefended = label == "none"
        if not row["leakage_seeds"] or (row["drop"] is None and not undefended):
            continue
        points.append(
            DefensePoint(
                curve=UNDEFENDED if undefended else defense,
                setting=UNDEFENDED if undefended else strength,
                runs=(),
                drop=summaries.Estimate(0.0, np.nan, np.nan) if undefended else row["drop"],
                leakage=row["ssim_estimate"],
                floor=np.nan if row["floor"] is None else row["floor"],
                verdict=row["verdict"],
            )
        )
    return points


def collect(sweep_dir: Path, settings: dict[str, list[dict]], read) -> dict[str, list[dict]]:
    """``read(run)`` with its seed, for every finished run under ``sweep_dir``, by the label of its defenses in
    ``settings`` (nothing where the sweep has not started)."""
    results: dict[str, list[dict]] = {label: [] for label in settings}
    if not (sweep_dir / "sweep.json").is_file():
        return results
    label_of = {settings_key(defenses): label for label, defenses in settings.items()}
    for run in fedsim.load_sweep(sweep_dir).runs.values():
        label = label_of.get(settings_key([d.model_dump() for d in run.config.client.defenses]))
        if label is not None and run.summary:
            results[label].append({"seed": run.config.seed, **read(run)})
    return results


def collect_trained(out: Path, seeds: int, settings: dict[str, list[dict]], folder: str = TRAINED_FOLDER) -> dict:
    """:func:`collect` of :func:`leakage_run` over the trained-model leakage sweeps of every seed."""
    results: dict[str, list[dict]] = {label: [] for label in settings}
    for seed in range(seeds):
        for label, rows in collect(out / f"{folder}-seed-{seed}", settings, leakage_run).items():
            results[label].extend(rows)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_dir(parser)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-defenses")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument(
        "--trained-seeds",
        type=int,
        default=1,
        help="seeds of the leakage phase on the trained model (its 29 runs per seed cost about an hour on 2 cores)",
    )
    parser.add_argument(
        "--phase",
        choices=["all", "utility", "leakage", "trained"],
        default="all",
        help="run the utility phase (trained to its plateau), the leakage phase on the early model, the leakage "
        "phase on the trained model (after the utility phase: it starts from the undefended run's last model) or all",
    )
    parser.add_argument("--table-only", action="store_true", help="run nothing; tabulate the runs there are")
    add_docs_flag(parser, MARKER)
    args = parser.parse_args(argv)
    out = args.out.resolve()
    if not args.table_only:
        data = data_file(args.data_dir, MNIST)
        if args.phase in ("all", "leakage"):  # the cheaper phase first: its table has meaning sooner
            run_leakage_sweep(data, out, args.seeds, args.parallel)
        if args.phase in ("all", "utility"):
            run_sweep(data, out, args.seeds, args.parallel)
        if args.phase in ("all", "trained"):
            run_trained_leakage_sweep(out, args.trained_seeds, args.parallel)
    leakage_settings = leakage_defenses(out / "federated.npz")
    utility = collect(out / "sweep", UTILITY_DEFENSES, per_run)
    leakage = collect(out / "leakage", leakage_settings, leakage_run)
    trained = collect_trained(out, args.trained_seeds, leakage_settings)
    baseline = {r["seed"]: r["accuracy"] for r in utility["none"]}
    table = {
        label: summarize_label(utility.get(label, []), leakage[label], trained[label], baseline)
        for label in DEFENSES
        if utility.get(label) or leakage[label] or trained[label]
    }
    done = {
        phase: sum(len(rows) for rows in runs.values())
        for phase, runs in (("utility", utility), ("early", leakage), ("trained", trained))
    }
    finished = (
        f"{done['utility']} of {len(UTILITY_DEFENSES) * args.seeds} utility runs, {done['early']} of "
        f"{len(DEFENSES) * args.seeds} leakage runs on the early model and {done['trained']} of "
        f"{len(DEFENSES) * args.trained_seeds} on the trained one"
    )
    print(
        f"{CONFIG.name}: {finished} finished under {out}; the strongest attack per attacked client by SSIM against "
        "the ground truth; [95 % bootstrap interval]"
    )
    lines = strength_lines(table)
    skipped = [
        f"Not in this table: `{name}`, whose utility was not measured ({why})." for name, why in UTILITY_SKIPPED.items()
    ]
    budget_table = [*equal_utility_markdown(equal_utility(equal_utility_points(table)), BUDGETS), "", *skipped]
    print("\n".join(lines) + "\n\n" + "\n".join(budget_table))
    if "none" in table and table["none"]["accuracy"] is not None:
        accuracy = table["none"]["accuracy"].value
        classes = np.bincount(np.load(out / "federated.npz")["y_test"])
        constant = 100 * classes.max() / classes.sum()
        print(
            f"undefended accuracy at the plateau: {accuracy:.2f} % (protocol: >= 97): "
            f"{'met' if accuracy >= 97 else 'NOT met'}; the constant predictor's: {constant:.1f} %"
        )
    if args.docs:
        runs = [
            run
            for folder in (
                out / "sweep",
                out / "leakage",
                *(out / f"{TRAINED_FOLDER}-seed-{seed}" for seed in range(args.trained_seeds)),
            )
            if (folder / "sweep.json").is_file()
            for run in fedsim.load_sweep(folder).runs.values()
        ]
        seconds = sum(float((run.summary or {}).get("wall_seconds_last_session", 0.0)) for run in runs)
        note = (
            f"Regenerate with `.venv/bin/python -m bench.defenses --data-dir DIR --docs`, DIR holding `{MNIST}` "
            f"({finished} finished, "
            f"{seconds / 60:.0f} min of run time on {os.cpu_count()} CPU cores; `--parallel 2` runs two at once). "
            f"Seeds 0-{args.seeds - 1} (the trained model: 0-{args.trained_seeds - 1}); [95 % bootstrap intervals] "
            "(`fedsim.reporting.summaries`: images resampled "
            "within each seed; accuracy and drop over the seeds)."
        )
        write_between_markers(DOCS_PAGES[MARKER], MARKER, [note, "", *lines])
        write_between_markers(DOCS_PAGES[MARKER], EQUAL_UTILITY_MARKER, budget_table)
        points = curve_points(table)
        defense_curves_figure(
            curves(points),
            [p for p in points if p.undefended],
            FIGURE,
            drop_label="accuracy drop at the plateau (points; utility phase)",
        )
        print(f"wrote {FIGURE}")
    print(json.dumps({label: {k: getattr(v, "value", v) for k, v in row.items()} for label, row in table.items()}))


if __name__ == "__main__":
    main()
