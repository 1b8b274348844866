"""Defenses at equal utility, judged on the models the federation sends: the strongest attack per defense and strength.

The protocol is paper 001's: a defense is judged by the strongest attack against it at a given utility loss, so
each defense is run at several strengths (``bench.defense_setup.STRENGTHS``) and, for an accuracy budget (a drop of
at most 1, 3 or 10 points), the strength that leaks least within it is what counts
(``fedsim.reporting.equal_utility``). Every defense perturbs the gradient of each training step (FedSGD: one local
step per round). Each phase is resumable (finished runs are skipped):

* **Tuning** (``OUT/dpsgd-tuning.json``, ``bench.dpsgd_tuning``): DP-SGD's clipping norm and learning rate per
  epsilon, on public images only.
* **Utility phase** (``configs/defense-evaluation.yaml``, ``OUT/sweep``): ``lenet-fc`` pre-trained on public
  images to about 82 % (``bench.defense_setup``), then trained by ten clients of 600 images, each sending one
  defended gradient of 64 images per round, for a fixed ``federation.rounds`` (no early stop: a slow learner is
  not cut short, and DP-SGD spends the epsilon its row is labelled with). Utility is the mean test accuracy of the
  last ``FINAL_EVALUATIONS`` rounds, and its drop against the undefended run of the same seed. Every round's
  global model is kept: these are the models the federation sent.
* **Leakage phase on the sent models**: for each utility run and each round of ``SENT_ROUNDS`` (round 1 sends the
  public model; a later round R sends the model that run's round R - 1 ended with), the same federation from that
  model with every client sending the defended gradient of 2 images (the attacker's best case), every client
  attacked. DP-SGD runs at the noise multiplier its epsilon set over the utility phase. A cell is one setting at
  one round over every client of every seed: at least 30 targets, judged by the calibrated test
  (``fedsim.judge.verdict.judge_cell`` over the attacker's picks). Two stages (``bench.defense_screen``):

  * the screen (``OUT/screen/<setting>-seed-S``, ``--phase screen``): Inverting Gradients and the adaptive attack
    of the defense in force on a small budget; a cell it calls ``leaks`` is settled;
  * full strength (``OUT/sent/<setting>-seed-S``, ``--phase leakage`` runs the screen, then this): the cells the
    screen did not call ``leaks``, attacked by ``attacks: strongest`` with the papers' presets and the saturation
    step at its defaults. Each stage tests at half the stated level.

Prints one line per setting, then the equal-utility table; last line: JSON. ``--docs`` writes both into
``docs/results/defenses.md`` and draws the frontier per defense.

    .venv/bin/python -m bench.defenses [--data-dir DIR] [--out DIR] [--parallel 2] [--seeds 2]
                                       [--phase all|tuning|utility|screen|leakage] [--rounds 1,75,150]
                                       [--only LABEL,...] [--table-only] [--docs]
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import numpy as np
import torch
import yaml

import fedsim
from bench.common import (
    DOCS_PAGES,
    MNIST,
    REPO,
    add_data_dir,
    add_docs_flag,
    data_file,
    fedsim_sweep,
    interval,
    leakage_cells,
    picked_verdicts,
    strongest_images,
    write_between_markers,
)
from bench.defense_screen import (
    FULL_FOLDER,
    SCREEN_FOLDER,
    STAGE_LEVEL,
    decided_cell,
    full_strength_rounds,
    screen_attacks,
    undecided,
)
from bench.defense_setup import (
    CONFIG,
    DEFENSES,
    UTILITY_DEFENSES,
    UTILITY_SKIPPED,
    build_lenet_fc,
    defense_of,
    pretrain,
    public_arrays,
    settings_key,
    split_data,
)
from bench.defense_table import COLUMNS_NOTE, curve_points, equal_utility_cells, equal_utility_points, strength_lines
from bench.dpsgd_tuning import Federation, cached_tuning, tune
from fedsim.judge.verdict import judge_cell
from fedsim.reporting.defense_curves import curves
from fedsim.reporting.equal_utility import BUDGETS, equal_utility_markdown
from fedsim.reporting.figures import defense_curves_figure
from fedsim.rundir.layout import CHECKPOINT_DIR, checkpoint_file

MARKER = "defense-table"
FIGURE = REPO / "docs" / "images" / "defense-curves.png"  # the frontier per defense, drawn by --docs
EQUAL_UTILITY_MARKER = "equal-utility-table"
UTILITY_FOLDER = "utility-{defense}"  # under --out, one per defense
FINAL_EVALUATIONS = 20  # utility: the mean test accuracy of the last rounds (one round's accuracy is noisy)
#: the rounds whose sent model is attacked: the public model (1), mid-way and the last round
SENT_ROUNDS = (1, 75, 150)
LEAKAGE_CLIENT = {"batch_size": 2}
#: clients of a leakage run, every one attacked: x 2 seeds, the 30 targets a cell's test needs
LEAKAGE_CLIENTS = 15
#: DP-SGD's Poisson batch of 2 expected images is empty with probability e^-2 (13.5 %), and an empty batch is no
#: target: 20 clients keep a cell at 30 targets or more but for a 1 % chance (34.6 expected over 2 seeds)
DPSGD_LEAKAGE_CLIENTS = 20
LEAKAGE_ADVERSARY = {
    "tap": "mitm",
    "targets": "per-client",
    "rounds": [1],
    "knows": {"local_training": True, "num_samples": True, "labels": "inferred"},
    "attacks": "strongest",  # every attack that applies, the papers' presets included, then the saturation step
    # the adaptive attacks tuned on public images of this setting (cached per setting)
    "tuning": {"select": "adaptive", "trials": 6, "max_iterations": 300},
    "save_images": True,
    # a cell may be tested twice, by the screen and at full strength: each at half the level (bench.defense_screen)
    "floor": {"level": STAGE_LEVEL},
}


def base_config() -> dict:
    return yaml.safe_load(CONFIG.read_text())


def noise_multiplier(epsilon: float, delta: float = 1e-5, accountant: str = "rdp") -> float:
    """The noise multiplier DP-SGD runs at for ``epsilon`` over the utility phase (the planned rounds, each client
    sampling a batch of ``client.batch_size`` of its 600 images)."""
    from clients.defenses.dpsgd import noise_for_budget

    raw = base_config()
    federation, client = raw["federation"], raw["client"]
    sample_rate = client["batch_size"] / 600
    return noise_for_budget(epsilon, delta, sample_rate, client["local_steps"] * federation["rounds"], accountant)


def tuned_dpsgd(out: Path, public: Path, checkpoint: Path, epsilon: float) -> dict:
    """DP-SGD at ``epsilon`` with the clipping norm and learning rate tuned on public images (cached)."""
    raw = base_config()

    def compute():
        model = build_lenet_fc(raw["model"])
        model.load_state_dict(torch.load(checkpoint, weights_only=True))
        start = {name: value.detach() for name, value in model.named_parameters()}
        federation = Federation(
            clients=raw["federation"]["num_clients"],
            batch_size=raw["client"]["batch_size"],
            rounds=raw["federation"]["rounds"],
            noise_multiplier=noise_multiplier(epsilon),
        )
        pretraining, tuning = public_arrays(public, "pretrain"), public_arrays(public, "tuning")
        return tune(model, start, pretraining, tuning, federation, epsilon)

    tuned = cached_tuning(out / "dpsgd-tuning.json", epsilon, compute)
    return {
        "defenses": [{"name": "dpsgd", "target_epsilon": epsilon, "max_grad_norm": tuned.max_grad_norm}],
        "lr": tuned.lr,
    }


def client_settings(out: Path, public: Path, checkpoint: Path, settings: dict[str, list[dict]]) -> dict[str, dict]:
    """label -> what the setting changes in the client section: its defenses (DP-SGD's with the tuned clipping
    norm) and, for DP-SGD, the tuned learning rate."""
    changed = {}
    for label, defenses in settings.items():
        dpsgd = [d for d in defenses if d["name"] == "dpsgd"]
        changed[label] = (
            tuned_dpsgd(out, public, checkpoint, dpsgd[0]["target_epsilon"]) if dpsgd else {"defenses": defenses}
        )
    return changed


def prepare(data: Path, out: Path) -> tuple[Path, Path, Path]:
    """The split arrays and the public model (made once): (federated, public, checkpoint)."""
    federated, public = split_data(data, out)
    checkpoint = pretrain(public, federated, base_config()["model"], out)
    return federated, public, checkpoint


def run_utility(out: Path, seeds: int, parallel: int, clients: dict[str, dict]) -> None:
    """Run (or continue) the utility sweeps of ``clients`` x seeds: one folder per defense (``UTILITY_FOLDER``), so
    that a defense added later, or tuned later (DP-SGD), does not renumber another's points."""
    raw = base_config()
    raw["data"] = {**raw["data"], "dataset": "npz", "path": str(out / "federated.npz")}
    raw["model"] = {**raw["model"], "checkpoint": str(out / "pretrained.pt")}
    by_defense: dict[str, dict[str, dict]] = {}
    for label, changes in clients.items():
        by_defense.setdefault(defense_of(label)[0], {})[slug(label)] = {**raw["client"], **changes}
    for defense, grid in by_defense.items():
        # seeds outermost: a sweep stopped early has every strength at the first seeds rather than a few at all
        raw["sweep"] = {"grid": {"seed": list(range(seeds)), "client": grid}}
        folder = out / UTILITY_FOLDER.format(defense=slug(defense))
        fedsim_sweep(raw, folder.with_name(folder.name + "-config.yaml"), folder, parallel)


def slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", label).strip("-")


def sent_model(out: Path, run: fedsim.rundir.reader.Run | None, sent_round: int) -> Path | None:
    """The model the federation sent in ``sent_round``: the public one in round 1, else what ``run``'s previous
    round ended with (None where that run did not get there)."""
    if sent_round == 1:
        return out / "pretrained.pt"
    if run is None:
        return None
    path = run.path / CHECKPOINT_DIR / checkpoint_file(sent_round - 1)
    return path if path.is_file() else None


def round_sent(checkpoint: str | Path) -> int:
    """The inverse of :func:`sent_model`: the round in which a checkpoint file's model was sent."""
    match = re.fullmatch(r"round_(\d+)\.pt", Path(checkpoint).name)
    return int(match.group(1)) + 1 if match else 1


def leakage_client(changes: dict) -> tuple[dict, list[dict]]:
    """A setting's client section for the leakage runs: 2-image gradients, DP-SGD at its utility-phase noise."""
    raw = base_config()
    defenses = []
    for defense in changes["defenses"]:
        if defense["name"] == "dpsgd":
            multiplier = noise_multiplier(defense["target_epsilon"])
            defense = {k: v for k, v in defense.items() if k != "target_epsilon"} | {"noise_multiplier": multiplier}
        defenses.append(defense)
    return {**raw["client"], **changes, **LEAKAGE_CLIENT, "defenses": defenses}, defenses


def leakage_config(out: Path, changes: dict, seed: int, models: dict[int, Path], screen: bool = False) -> dict:
    """One setting and seed's leakage sweep: one round from each sent model in ``models`` (round -> checkpoint),
    every client attacked, at full strength or by the screen's attacks."""
    raw = base_config()
    raw["seed"] = seed
    raw["data"] = {**raw["data"], "dataset": "npz", "path": str(out / "federated.npz")}
    raw["client"], defenses = leakage_client(changes)
    poisson = any(defense["name"] == "dpsgd" for defense in defenses)
    clients = DPSGD_LEAKAGE_CLIENTS if poisson else LEAKAGE_CLIENTS
    raw["federation"] = {**raw["federation"], "num_clients": clients, "rounds": 1}
    raw["adversary"] = {**LEAKAGE_ADVERSARY, "clients": list(range(raw["federation"]["num_clients"]))}
    if screen:
        raw["adversary"]["attacks"] = screen_attacks(raw["client"]["defenses"])
    raw["model"] = {**raw["model"], "checkpoint": str(models[min(models)])}
    raw["sweep"] = {"grid": {"model.checkpoint": {f"round-{r}": str(path) for r, path in sorted(models.items())}}}
    return raw


def run_leakage(
    out: Path, seeds: int, parallel: int, clients: dict[str, dict], rounds: tuple[int, ...], full: bool = True
) -> None:
    """The leakage phase: every setting and seed screened on the models its utility run sent in ``rounds``
    (settings without a utility run: round 1 only; rounds whose model does not exist yet are left for later), then,
    with ``full``, the cells the screen did not call ``leaks`` attacked at full strength."""
    utility = utility_runs(out, clients)
    sent = {
        (label, seed): {r: path for r in rounds if (path := sent_model(out, utility.get((label, seed)), r)) is not None}
        for seed in range(seeds)
        for label in clients
    }
    for (label, seed), models in sent.items():
        missing = sorted(set(rounds) - set(models))
        if missing:
            print(f"{label}, seed {seed}: no sent model yet for round(s) {missing} (utility run unfinished)")
        screen = leakage_config(out, clients[label], seed, models, screen=True)
        leakage_sweep(out, SCREEN_FOLDER, label, seed, screen, parallel)
    if not full:
        return
    screened = leakage_rows(out, clients, seeds, SCREEN_FOLDER)
    for label in clients:
        cells = {r: round_cell(rows) for r, rows in by_round(screened[label]).items()}
        wanted = full_strength_rounds(cells, rounds, seeds)
        for seed in range(seeds) if wanted else ():
            models = {r: path for r, path in sent[(label, seed)].items() if r in wanted}
            leakage_sweep(out, FULL_FOLDER, label, seed, leakage_config(out, clients[label], seed, models), parallel)


def leakage_sweep(out: Path, folder: str, label: str, seed: int, raw: dict, parallel: int) -> None:
    name = f"{slug(label)}-seed-{seed}"
    fedsim_sweep(raw, out / folder / f"{name}-config.yaml", out / folder / name, parallel)


def by_round(rows: list[dict]) -> dict[int, list[dict]]:
    """Leakage rows grouped by the sent round they attacked."""
    grouped: dict[int, list[dict]] = {}
    for row in rows:
        grouped.setdefault(row["round"], []).append(row)
    return dict(sorted(grouped.items()))


def utility_runs(out: Path, clients: dict[str, dict]) -> dict[tuple[str, int], object]:
    """(label, seed) -> the finished utility run of that setting."""
    label_of = {settings_key(changes["defenses"]): label for label, changes in clients.items()}
    found = {}
    for sweep in sorted(out.glob(UTILITY_FOLDER.format(defense="*"))):
        if not (sweep / "sweep.json").is_file():
            continue
        for run in fedsim.load_sweep(sweep).runs.values():
            label = label_of.get(settings_key([d.model_dump() for d in run.config.client.defenses]))
            if label is not None and run.summary:
                found[(label, run.config.seed)] = run
    return found


def per_run(run: fedsim.rundir.reader.Run) -> dict:
    """One utility run: its final accuracy (the mean of the last ``FINAL_EVALUATIONS`` rounds) and its epsilon."""
    evaluations = run.events("eval")
    summary = run.summary or {}
    return {
        "accuracy": float(evaluations["accuracy"].tail(FINAL_EVALUATIONS).mean()),
        "start": float(evaluations["accuracy"].iloc[0]),
        "rounds": int(summary.get("rounds_completed", len(evaluations) - 1)),
        "epsilon": summary.get("epsilon_example"),
        "lr": run.config.client.lr,
    }


def leakage_run(run: fedsim.rundir.reader.Run) -> dict:
    """One leakage run: the attacker's pick and the oracle per attacked client, each pick's floor and verdict."""
    attacks = run.events("attack")
    return {
        "round": round_sent(run.config.model.checkpoint),
        "matched_fraction": attacks["matched_fraction"].dropna().tolist() if "matched_fraction" in attacks else [],
        **strongest_images(run, per="round"),
        **picked_verdicts(run),
    }


def leakage_rows(out: Path, clients: dict[str, dict], seeds: int, folder: str) -> dict[str, list[dict]]:
    """label -> :func:`leakage_run` of every finished leakage run of that setting, with its seed."""
    found: dict[str, list[dict]] = {label: [] for label in clients}
    for label in clients:
        for seed in range(seeds):
            sweep = out / folder / f"{slug(label)}-seed-{seed}"
            if not (sweep / "sweep.json").is_file():
                continue
            for run in fedsim.load_sweep(sweep).runs.values():
                if run.summary:
                    found[label].append({"seed": seed, **leakage_run(run)})
    return found


def round_cell(rows: list[dict]) -> dict:
    """One setting at one sent round, over its seeds: the attacker's pick's SSIM, the cell's verdict, saturation."""
    verdict = judge_cell([v for r in rows for v in r["verdicts"]], STAGE_LEVEL)
    picks = [v for r in rows for v in r.get("pick_ssim", []) if v is not None]
    return {
        **leakage_cells(rows),
        "seeds": len({r["seed"] for r in rows}),
        "verdict": verdict,
        "pick_value": float(np.mean(picks)) if picks else np.nan,
        "floor_value": float(np.mean([v for r in rows for v in r["floor"]])) if any(r["floor"] for r in rows) else None,
    }


def summarize(utility: list[dict], screened: list[dict], full: list[dict], baseline: dict[int, float]) -> dict:
    """A setting's cells: utility over its seeds, and one leakage cell per sent round (``decided_cell``: the
    full-strength cell where it ran, else the screen's)."""
    drops = [100 * (baseline[r["seed"]] - r["accuracy"]) for r in utility if r["seed"] in baseline]
    epsilons = [r["epsilon"] for r in utility if r["epsilon"] is not None]
    screen_cells = {r: round_cell(rows) for r, rows in by_round(screened).items()}
    full_cells = {r: round_cell(rows) for r, rows in by_round(full).items()}
    cells = {r: decided_cell(screen_cells.get(r), full_cells.get(r)) for r in sorted({*screen_cells, *full_cells})}
    return {
        "seeds": len(utility),
        "accuracy": interval([100 * r["accuracy"] for r in utility]) if utility else None,
        "gain": interval([100 * (r["accuracy"] - r["start"]) for r in utility]) if utility else None,
        "drop": interval(drops) if drops else None,
        "epsilon": max(epsilons) if epsilons else None,
        "lr": utility[0]["lr"] if utility else None,
        "rounds": {r: cell for r, cell in cells.items() if cell is not None},
    }


def tabulate(out: Path, clients: dict[str, dict], seeds: int) -> dict[str, dict]:
    """label -> :func:`summarize` of the runs there are (settings with none are left out)."""
    utility: dict[str, list[dict]] = {label: [] for label in clients}
    for (label, seed), run in utility_runs(out, clients).items():
        if seed < seeds:
            utility[label].append({"seed": seed, **per_run(run)})
    screened = leakage_rows(out, clients, seeds, SCREEN_FOLDER)
    full = leakage_rows(out, clients, seeds, FULL_FOLDER)
    baseline = {r["seed"]: r["accuracy"] for r in utility.get("none", [])}
    table = {label: summarize(utility[label], screened[label], full[label], baseline) for label in clients}
    return {label: row for label, row in table.items() if row["seeds"] or row["rounds"]}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_dir(parser)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-defenses")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument(
        "--phase",
        choices=["all", "tuning", "utility", "screen", "leakage"],
        default="all",
        help="screen: the leakage phase's screen only; leakage: the screen, then full strength where it found no leak",
    )
    parser.add_argument(
        "--rounds",
        default=",".join(map(str, SENT_ROUNDS)),
        help="the sent rounds attacked (comma-separated; 1 is the public model)",
    )
    parser.add_argument(
        "--only",
        default=None,
        help="setting labels separated by ; (default: every setting); the utility phase runs each defense's "
        "strengths as one sweep, so name all of a defense's strengths or none",
    )
    parser.add_argument("--table-only", action="store_true", help="run nothing; tabulate the runs there are")
    add_docs_flag(parser, MARKER)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out, rounds = args.out.resolve(), tuple(int(r) for r in args.rounds.split(","))
    wanted = set(args.only.split(";")) if args.only else set(DEFENSES)
    settings = {label: defenses for label, defenses in DEFENSES.items() if label in wanted}
    _, public, checkpoint = prepare(data_file(args.data_dir, MNIST), out)
    clients = client_settings(out, public, checkpoint, settings)
    trained = {label: changes for label, changes in clients.items() if label in UTILITY_DEFENSES}
    if not args.table_only and args.phase in ("all", "utility"):
        run_utility(out, args.seeds, args.parallel, trained)
    if not args.table_only and args.phase in ("all", "screen", "leakage"):
        run_leakage(out, args.seeds, args.parallel, clients, rounds, full=args.phase != "screen")
    table = tabulate(out, clients, args.seeds)
    done = (
        sum(row["seeds"] for row in table.values()),
        sum(cell["seeds"] >= args.seeds for row in table.values() for cell in row["rounds"].values()),
    )
    cells = sum(len(rounds) if label in trained else 1 for label in clients)  # untrained settings: round 1 only
    finished = f"{done[0]} of {len(trained) * args.seeds} utility runs and {done[1]} of {cells} leakage cells"
    print(f"{CONFIG.name}: {finished} finished under {out}")
    lines = strength_lines(table, rounds)
    skipped = [f"`{name}` has no utility run ({why}): round 1 only." for name, why in UTILITY_SKIPPED.items()]
    pending = undecided(table, rounds)
    waiting = [
        "Unsettled (the screen called no sent round's cell `leaks`, and full strength has not attacked them yet; "
        f"their SSIM is the screen's, a lower bound): {', '.join(pending)}."
    ]
    budget_table = [
        *equal_utility_markdown(equal_utility_cells(equal_utility_points(table, rounds)), BUDGETS),
        "",
        *skipped,
        *(waiting if pending else []),
    ]
    print("\n".join(lines) + "\n\n" + COLUMNS_NOTE + "\n\n" + "\n".join(budget_table))
    if args.docs:
        folders = [
            *out.glob(UTILITY_FOLDER.format(defense="*")),
            *(out / SCREEN_FOLDER).glob("*-seed-*"),
            *(out / FULL_FOLDER).glob("*-seed-*"),
        ]
        runs = [r for f in folders if (f / "sweep.json").is_file() for r in fedsim.load_sweep(f).runs.values()]
        seconds = sum(float((run.summary or {}).get("wall_seconds_last_session", 0.0)) for run in runs)
        note = (
            f"Regenerate with `.venv/bin/python -m bench.defenses --data-dir DIR --docs`, DIR holding `{MNIST}` "
            f"({finished} finished, {seconds / 60:.0f} min of run time on {os.cpu_count()} CPU cores). Seeds "
            f"0-{args.seeds - 1}; [95 % bootstrap intervals] (`fedsim.reporting.summaries`: images resampled within "
            "each seed; accuracy, gain and drop over the seeds)."
        )
        write_between_markers(DOCS_PAGES[MARKER], MARKER, [note, "", *lines, "", COLUMNS_NOTE])
        write_between_markers(DOCS_PAGES[MARKER], EQUAL_UTILITY_MARKER, budget_table)
        points = curve_points(table, rounds)
        if points:  # a frontier needs leakage: none before the leakage phase has run
            defense_curves_figure(
                curves(points),
                [p for p in points if p.undefended],
                FIGURE,
                drop_label="accuracy drop (points; mean of the last rounds)",
            )
            print(f"wrote {FIGURE}")
    print(json.dumps({label: {"accuracy": getattr(row["accuracy"], "value", None)} for label, row in table.items()}))


if __name__ == "__main__":
    main()
