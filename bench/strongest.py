"""The strongest attack per defense on single-image updates (configs/defense-comparison.yaml, round 1).

For each defense, one run of ``configs/defense-comparison.yaml`` (DLG's tanh LeNet, 20 clients with
CIFAR-10 training images, one SGD step on one image) stopped after round 1: a man-in-the-middle inverts
clients 0-2's updates with every attack whose requirements hold (``attacks: strongest``, the adaptive
variants where their defense is in force). Prints, per defense, the mean over the three clients of each
client's best SSIM and which attack won it, beside DLG's alone (the attack the older defense table used).
The adaptive attacks' TV weights were tuned on CIFAR-10 *test* images 0-2 (``bench.adaptive_tuning``); the
clients' images here are training images, never used for tuning. Last line: JSON.

    .venv/bin/python -m bench.strongest [--data-dir DIR] [--only prune,noise] [--out DIR]

``--paper-003``: paper 003's set-up instead (DLG's LeNet with its uniform init, one SGD step at lr 0.1 on one
CIFAR-10 training image per client, 3 clients; training images 2000-2002, which no attack was tuned on).
``attacks: strongest`` at its defaults (every applicable attack, its defaults and presets, then the saturation
step at ``adversary.budget``'s defaults) against paper 003's DLG settings alone (``dlg@paper-003``) on the same
images. Per client: PSNR of the attacker's pick (the lowest gradient match, no ground truth), the best over
attacks by ground truth (labelled so), the attack that won, its budget and whether it saturated.

    .venv/bin/python -m bench.strongest --paper-003 [--data-dir DIR] [--images 2000,2001,2002]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import logging
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

import fedsim
from bench.common import CIFAR, CONFIGS, add_data_dir, data_file
from fedsim.config import SECAGG_STRATEGY, AttackOptions, load_config
from fedsim.engine.run import run_experiment

CONFIG = CONFIGS / "defense-comparison.yaml"
VARIANTS: dict[str, str] = {
    "none": "[]",
    "prune": "[{name: prune, ratio: 0.9}]",
    "noise": "[{name: noise, sigma: 0.01}]",
    "gradient_dropout": "[{name: gradient_dropout, p: 0.6, sigma: 0.005}]",
    "soteria": "[{name: soteria, ratio: 0.8}]",
    "clip": "[{name: clip, max_norm: 0.5}]",
    "pdpsgd": "[{name: pdpsgd, sigma: 0.1}]",
    "dpsgd": "[{name: dpsgd, target_epsilon: 8, max_grad_norm: 1.0}]",
}


def run_variant(name: str, data: Path, out: Path) -> dict:
    run_dir = out / name
    if not (run_dir / "summary.json").is_file():  # resume: a finished variant is read, not rerun
        overrides = [
            "data.dataset=npz",
            f"data.path={data}",
            f"output.dir={out}",
            f"output.run_name={name}",
            "federation.rounds=1",
            "adversary.save_images=false",
            f"client.defenses={VARIANTS[name]}",
        ]
        if run_dir.exists():
            raise SystemExit(f"{run_dir}: an unfinished run; remove it to rerun")
        run_experiment(load_config(CONFIG, overrides), quiet=True)
    run = fedsim.load_run(run_dir)
    best = run.strongest("ssim_mean", per="target")
    attacks = run.events("attack")
    dlg = attacks[(attacks["attack"] == "dlg") & (attacks["status"] == "ok")]
    return {
        "ssim": float(best["ssim_mean"].mean()),
        "psnr": float(best["psnr_mean"].mean()),
        "winners": dict(Counter(best["attack"])),
        "dlg_ssim": float(dlg["ssim_mean"].mean()) if not dlg.empty else None,
        "attacks": sorted(set(attacks["attack"])),
    }


PAPER_003 = CONFIGS / "papers" / "003-dlg-per-client-vs-aggregated.yaml"
PAPER_003_LR = 0.1  # the config's client.lr


def paper003_views(x: torch.Tensor, y: torch.Tensor) -> list:
    """One SGD step of each one-image client from the same uniform-init LeNet, as configs/papers/003 trains."""
    from adversary.view import AttackerView, LocalTraining
    from clients.training import train_locally
    from fedsim.config import ClientConfig, ModelConfig
    from fedsim.models import build_model

    model = build_model(ModelConfig(name="lenet", init="uniform"), 3, 10, 32, seed=0)
    start = {key: value.clone() for key, value in model.state_dict().items()}
    views = []
    for i in range(len(x)):
        client = copy.deepcopy(model)
        one_step = ClientConfig(lr=PAPER_003_LR, batch_size=1, local_steps=1)
        train_locally(client, x[i : i + 1], y[i : i + 1], np.array([i]), one_step, seed=i)
        views.append(
            AttackerView(
                round=1,
                tap="mitm",
                target=f"client:{i}",
                model=model,
                global_state=start,
                observed_state={key: value.detach().clone() for key, value in client.state_dict().items()},
                input_shape=(3, 32, 32),
                num_classes=10,
                num_samples=1,
                local_training=LocalTraining(lr=PAPER_003_LR, local_steps=1, batch_size=1),
                # the box a run gives its attacker (normalize: none: [0, 1] per channel), as the peer side has
                input_bounds=(torch.zeros(3), torch.ones(3)),
            )
        )
    return views


def paper003_setup(data: Path, images: list[int]):
    """Paper 003's views of ``images`` and `attacks: strongest` resolved for them: (x, y, views, attacks, budget)."""
    from adversary.adversary import saturation_budget
    from fedsim.config import parse_config
    from fedsim.engine.leakage.portfolio import attack_setting, resolve_attacks
    from fedsim.models import build_model

    arrays = np.load(data)
    x = torch.from_numpy(arrays["x_train"][images].astype(np.float32) / 255.0)
    y = torch.from_numpy(arrays["y_train"][images].astype(np.int64))
    raw = load_config(PAPER_003).model_dump(mode="json", exclude={"sweep"})
    raw["adversary"] = {**raw["adversary"], "attacks": "strongest", "targets": "per-client"}
    raw["adversary"].pop("portfolio", None)
    config = parse_config(raw)
    model = build_model(config.model, 3, 10, 32, seed=0)
    secagg = config.strategy.name == SECAGG_STRATEGY
    setting = attack_setting(config.adversary, config.client, config.model.name, secagg, model, (3, 32, 32), 10)
    config = config.model_copy(update={"adversary": resolve_attacks(config.adversary, config.client.defenses, setting)})
    budget = saturation_budget(config.adversary)
    assert budget is not None, "attacks: strongest with adversary.budget.saturate saturates"
    return x, y, paper003_views(x, y), config.adversary.attacks, budget


def paper003(data: Path, images: list[int], raced: bool = True, reference: bool = True) -> dict:
    """``attacks: strongest`` at its defaults (raced, or with ``raced`` False every attack at its full budget
    first) vs ``dlg@paper-003`` on paper 003's set-up (see the module doc)."""
    from adversary.inversion import run_attack
    from adversary.inversion.race import portfolio
    from fedsim.judge.scoring import score_reconstruction

    # one line per attack, rung and saturation pass, as it goes (importing fedsim configures no handler)
    logging.basicConfig(format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("fedsim").setLevel(logging.INFO)
    x, y, views, attacks, budget = paper003_setup(data, images)
    budget = budget if raced else dataclasses.replace(budget, rungs=0)
    device = torch.device("cpu")

    def entry(options, seed):
        def run(chosen, targets=None):
            return run_attack(chosen, views if targets is None else [views[t] for t in targets], seed, device)

        return options, run

    name = "raced" if raced else "unraced"
    print(f"paper 003 set-up, training images {images}, {name}: {', '.join(o.label for o in attacks)}", flush=True)
    started, cpu_started = time.perf_counter(), time.process_time()
    outcomes = portfolio([entry(o, 1000 + i) for i, o in enumerate(attacks)], views, budget, device)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    reference_started = time.perf_counter()
    paper = run_attack(AttackOptions(name="dlg", preset="paper-003"), views, 1, device) if reference else None
    reference_seconds = time.perf_counter() - reference_started

    def psnr(rec, t: int) -> float:
        score = score_reconstruction(rec, x[t : t + 1], y[t : t + 1], lambda images: images)
        return float(score.psnr_mean)

    clients = []
    for t in range(len(views)):
        rows = [
            (options, outcome[t])
            for options, outcome in zip(attacks, outcomes, strict=True)
            if not isinstance(outcome, BaseException)
        ]
        matched = [(rec.gradient_match, options, rec) for options, rec in rows if rec.gradient_match is not None]
        _, pick_options, pick = min(matched, key=lambda item: item[0])
        by_truth = max(rows, key=lambda row: psnr(row[1], t))
        clients.append(
            {
                "image": images[t],
                "pick": pick_options.label,
                "pick_psnr": psnr(pick, t),
                "pick_iterations": pick.iterations,
                "pick_restarts": pick.restarts or getattr(pick_options, "restarts", 1),
                "pick_saturation": pick.saturation,
                "best_by_truth": by_truth[0].label,
                "best_by_truth_psnr": psnr(by_truth[1], t),
                "best_by_truth_budget": [by_truth[1].iterations, by_truth[1].restarts or by_truth[0].restarts],
                "best_by_truth_saturation": by_truth[1].saturation,
                "paper_003_psnr": psnr(paper[t], t) if paper is not None else None,
                "per_attack": {options.label: [round(psnr(rec, t), 2), rec.saturation] for options, rec in rows},
                "eliminated_at": {o.label: r.eliminated_at for o, r in rows if r.eliminated_at is not None},
            }
        )
    failed = {o.label: str(out) for o, out in zip(attacks, outcomes, strict=True) if isinstance(out, BaseException)}
    return {
        "portfolio": name,
        "clients": clients,
        "strongest_psnr_mean": float(np.mean([c["pick_psnr"] for c in clients])),
        "best_by_truth_psnr_mean": float(np.mean([c["best_by_truth_psnr"] for c in clients])),
        "paper_003_psnr_mean": float(np.mean([c["paper_003_psnr"] for c in clients])) if reference else None,
        "strongest_seconds": seconds,
        "strongest_cpu_seconds": cpu_seconds,
        "paper_003_seconds": reference_seconds,
        "failed": failed,
    }


def print_paper003(result: dict) -> None:
    saturated = all(c["pick_saturation"] == "saturated" for c in result["clients"])
    header = f"strongest, {result['portfolio']}" + (" (saturated)" if saturated else " (NOT saturated: lower bound)")
    n = len(result["clients"][0]["per_attack"])
    print(f"   {'image':>5}  {header:<44} {'PSNR':>6}  {'dlg@paper-003':>13}  ground-truth selection over {n} attacks")
    for c in result["clients"]:
        budget = f"{c['pick']} ({c['pick_iterations']} it x {c['pick_restarts']} restarts, {c['pick_saturation']})"
        paper = f"{c['paper_003_psnr']:13.1f}" if c["paper_003_psnr"] is not None else f"{'-':>13}"
        print(
            f"   {c['image']:>5}  {budget:<44} {c['pick_psnr']:6.1f}  {paper}  "
            f"{c['best_by_truth']} {c['best_by_truth_psnr']:.1f} ({c['best_by_truth_budget'][0]} it x "
            f"{c['best_by_truth_budget'][1]} restarts, {c['best_by_truth_saturation']})"
        )
    reference = result["paper_003_psnr_mean"]
    print(
        f"   mean   strongest {result['strongest_psnr_mean']:.1f} dB by the attacker's pick, "
        f"{result['best_by_truth_psnr_mean']:.1f} dB by ground-truth selection over {n} attacks "
        f"({result['strongest_seconds']:.0f} s, {result['strongest_cpu_seconds']:.0f} s CPU)"
        + (f"; dlg@paper-003 {reference:.1f} dB ({result['paper_003_seconds']:.0f} s)" if reference is not None else "")
    )
    for c in result["clients"]:
        out = ", ".join(f"{k} at rung {v}" for k, v in c["eliminated_at"].items())
        print(
            f"   image {c['image']}: "
            + ", ".join(f"{k} {v[0]} ({v[1]})" for k, v in c["per_attack"].items())
            + (f"; eliminated: {out}" if out else "")
        )
    if result["failed"]:
        print(f"   failed: {result['failed']}")


def merged(results: list[dict]) -> dict[str, dict]:
    """Results of one portfolio run on several processes (one image each) as one: per portfolio, the clients and
    the summed times."""
    out: dict[str, dict] = {}
    for result in results:
        into = out.setdefault(result["portfolio"], {"portfolio": result["portfolio"], "clients": [], "seconds": 0.0})
        into["clients"] += result["clients"]
        into["seconds"] += result["strongest_cpu_seconds"]
    return out


def print_comparison(results: list[dict]) -> dict:
    """Raced against unraced on the images both ran: the attacker's pick (PSNR, saturation), and CPU time per target."""
    by_name = merged(results)
    raced, unraced = by_name["raced"], by_name["unraced"]
    raced_by_image = {c["image"]: c for c in raced["clients"]}
    unraced_by_image = {c["image"]: c for c in unraced["clients"]}
    both = sorted(set(raced_by_image) & set(unraced_by_image))
    print(f"   {'image':>5}  {'unraced pick':<36} {'PSNR':>6}  {'raced pick':<36} {'PSNR':>6}  same pick")
    for image in both:
        u, r = unraced_by_image[image], raced_by_image[image]
        print(
            f"   {image:>5}  {u['pick'] + ' (' + u['pick_saturation'] + ')':<36} {u['pick_psnr']:6.1f}  "
            f"{r['pick'] + ' (' + r['pick_saturation'] + ')':<36} {r['pick_psnr']:6.1f}  {u['pick'] == r['pick']}"
        )
    summary = {
        name: {
            "images": len(run["clients"]),
            "pick_psnr_mean": float(np.mean([c["pick_psnr"] for c in run["clients"]])),
            "pick_psnr_mean_on_shared_images": float(
                np.mean([{c["image"]: c for c in run["clients"]}[i]["pick_psnr"] for i in both])
            )
            if both
            else None,
            "all_saturated": all(c["pick_saturation"] == "saturated" for c in run["clients"]),
            "cpu_seconds_per_target": run["seconds"] / len(run["clients"]),
        }
        for name, run in by_name.items()
    }
    summary["same_pick"] = sum(unraced_by_image[i]["pick"] == raced_by_image[i]["pick"] for i in both)
    summary["shared_images"] = len(both)
    ratio = summary["raced"]["cpu_seconds_per_target"] / summary["unraced"]["cpu_seconds_per_target"]
    summary["time_ratio"] = ratio
    for name in ("unraced", "raced"):
        row = summary[name]
        print(
            f"   {name}: {row['images']} images, attacker's pick {row['pick_psnr_mean']:.1f} dB mean "
            f"({row['pick_psnr_mean_on_shared_images']:.1f} dB on the {len(both)} images both ran), "
            f"{'every pick saturated' if row['all_saturated'] else 'NOT every pick saturated'}, "
            f"{row['cpu_seconds_per_target']:.0f} s CPU per target"
        )
    print(f"   raced / unraced CPU time per target: {ratio:.3f}; same pick on {summary['same_pick']} of {len(both)}")
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_dir(parser)
    parser.add_argument("--only", default=",".join(VARIANTS))
    parser.add_argument("--out", type=Path, default=None, help="runs go here (kept; rerunning resumes)")
    parser.add_argument("--paper-003", action="store_true", help="paper 003's set-up: strongest vs dlg@paper-003")
    parser.add_argument("--images", default="2000,2001,2002", help="with --paper-003: CIFAR-10 training images")
    parser.add_argument(
        "--portfolio",
        choices=("raced", "unraced", "both"),
        default="raced",
        help="with --paper-003: the raced portfolio (the default), every attack at its full budget first, or both "
        "on the same images, compared",
    )
    parser.add_argument("--no-reference", action="store_true", help="with --paper-003: leave dlg@paper-003 out")
    parser.add_argument("--json-out", type=Path, default=None, help="with --paper-003: write the results here")
    parser.add_argument("--combine", type=Path, nargs="+", default=None, help="compare results written by --json-out")
    args = parser.parse_args(argv)
    if args.combine:
        results = [result for path in args.combine for result in json.loads(path.read_text())]
        print(json.dumps(print_comparison(results)))
        return
    data = data_file(args.data_dir, CIFAR)
    if args.paper_003:
        torch.set_num_threads(1)  # one thread per attack process: two were 7-30x slower on two shared cores
        images = [int(i) for i in args.images.split(",")]
        names = ["unraced", "raced"] if args.portfolio == "both" else [args.portfolio]
        results = []
        for name in names:
            results.append(paper003(data, images, raced=name == "raced", reference=not args.no_reference))
            print_paper003(results[-1])
            if args.json_out is not None:  # kept after each portfolio: a long run that is stopped keeps what it has
                args.json_out.write_text(json.dumps(results))
        if len(results) == 2:
            print(json.dumps(print_comparison(results)))
        print(json.dumps(results))
        return
    out = (args.out or Path(tempfile.mkdtemp(prefix="fedsim-strongest-"))).resolve()
    print(f"{CONFIG.name}, round 1, clients 0-2, attacks: strongest; runs under {out}")
    # best per client by SSIM against the ground truth: an oracle's pick, labelled as such
    print(f"   {'defense':<17} {'GT-selected SSIM':>16} {'PSNR':>6} {'DLG SSIM':>9}  winning attack (per client)   ran")
    results = {}
    for name in args.only.split(","):
        started = time.perf_counter()
        result = results[name] = run_variant(name, data, out)
        winners = ", ".join(f"{attack} x{count}" for attack, count in result["winners"].items())
        dlg = f"{result['dlg_ssim']:.3f}" if result["dlg_ssim"] is not None else "-"
        print(
            f"   {name:<17} {result['ssim']:9.3f} {result['psnr']:6.1f} {dlg:>9}  {winners:<28} "
            f"{', '.join(result['attacks'])} ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    print(json.dumps({name: {k: r[k] for k in ("ssim", "psnr", "winners", "dlg_ssim")} for name, r in results.items()}))


if __name__ == "__main__":
    main()
