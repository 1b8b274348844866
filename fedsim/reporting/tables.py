"""The report's tables, derived from loaded runs (fedsim.rundir.reader): one job, numbers only, no plotting.

Column conventions: ``run`` names the run directory; metric columns are floats (NaN where a run has no
value). PSNR means count an exact pair at the 100 dB cap (adversary.scoring.PSNR_CAP_DB); ``psnr_exact`` counts them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from adversary.scoring import PSNR_CAP_DB
from fedsim.rundir.layout import RECONSTRUCTIONS_DIR, grid_file
from fedsim.rundir.reader import Run, Sweep

if TYPE_CHECKING:
    from fedsim.config import ExperimentConfig

AGGREGATE = "aggregate"


def numeric(frame: pd.DataFrame, column: str) -> pd.Series:
    """A column as floats (NaN where missing or not a number); all NaN when the column is absent."""
    if column not in frame:
        return pd.Series(math.nan, index=frame.index, dtype=float)
    return pd.to_numeric(frame[column], errors="coerce").astype(float)


def round_epsilons(run: Run) -> pd.Series:
    """Privacy spent by the end of each round: the largest client epsilon (dpsgd) or the aggregate's (strategy.dp).

    The one epsilon rule of every report (a run's ``rounds.csv`` and a sweep's tables and figures); empty
    when no DP mechanism reports one.
    """
    metrics = run.metrics
    if metrics.empty:
        return pd.Series(dtype=float)
    columns = [c for c in metrics.columns if c == "dp_epsilon" or c.endswith(".epsilon")]
    if not columns:
        return pd.Series(dtype=float)
    spent = metrics[["round", *columns]].copy()
    client_columns = [c for c in columns if c != "dp_epsilon"]
    spent.loc[metrics["event"] != "fit", client_columns] = math.nan  # per-client epsilons come from fit rows only
    per_round = spent.set_index("round")[columns].apply(pd.to_numeric, errors="coerce").max(axis=1)
    return per_round.groupby(level=0).max().dropna()


def utility_rounds(sweep: Sweep) -> pd.DataFrame:
    """Per run and round: test accuracy and loss, mean training loss of the clients, epsilon spent."""
    frames = []
    for name, run in sweep.runs.items():
        evals = run.events("eval")
        if evals.empty:
            continue
        table = evals[["round"]].copy()
        for column in ("accuracy", "loss"):
            table[column] = numeric(evals, column)
        fits = run.events("fit")
        if not fits.empty and "train_loss" in fits:
            ok = fits[fits["status"] == "ok"] if "status" in fits else fits
            table["train_loss"] = table["round"].map(numeric(ok, "train_loss").groupby(ok["round"]).mean())
        else:
            table["train_loss"] = math.nan
        table["epsilon"] = table["round"].map(round_epsilons(run))
        table.insert(0, "run", name)
        frames.append(table)
    columns = ["run", "round", "accuracy", "loss", "train_loss", "epsilon"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def attack_results(sweep: Sweep) -> pd.DataFrame:
    """One row per successful attack result: run, round, attack, target, target kind, PSNR, SSIM, LPIPS, labels."""
    columns = ["run", "round", "attack", "target", "kind", "batch_size", "psnr", "ssim", "lpips", "label_accuracy"]
    columns.append("lower_bound")  # the report marks such leakage (portfolio.verdict_warning)
    frames = []
    for name, run in sweep.runs.items():
        attacks = run.events("attack")
        if attacks.empty or "status" not in attacks:
            continue
        ok = attacks[attacks["status"] == "ok"]
        if ok.empty:
            continue
        psnr, exact = numeric(ok, "psnr_mean"), numeric(ok, "psnr_exact").fillna(0)
        frames.append(
            pd.DataFrame(
                {
                    "run": name,
                    "round": ok["round"].astype(int),
                    "attack": ok["attack"],
                    "target": ok["target"],
                    "kind": ["aggregate" if target == AGGREGATE else "per-client" for target in ok["target"]],
                    "batch_size": numeric(ok, "batch_size"),
                    # rows of older versions left psnr_mean empty when every pair was exact:
                    # the cap, as scoring counts it now
                    "psnr": psnr.where(~(psnr.isna() & (exact > 0)), PSNR_CAP_DB),
                    "ssim": numeric(ok, "ssim_mean"),
                    "lpips": numeric(ok, "lpips_mean"),
                    "label_accuracy": numeric(ok, "label_accuracy"),
                    # the run's leakage under a defense no running attack adapts to, or unsaturated: a lower bound
                    "lower_bound": ok["lower_bound"].fillna(False).astype(bool) if "lower_bound" in ok else False,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def leakage_rounds(attacks: pd.DataFrame) -> pd.DataFrame:
    """Per run, round and target kind: the strongest attack's PSNR, SSIM (max) and LPIPS (min) on each target,
    averaged over the attacked clients (``per-client``) or on the aggregate."""
    columns = ["run", "round", "kind", "targets", "psnr", "ssim", "lpips"]
    if attacks.empty:
        return pd.DataFrame(columns=columns)
    per_target = attacks.groupby(["run", "round", "kind", "target"], sort=False).agg(
        psnr=("psnr", "max"), ssim=("ssim", "max"), lpips=("lpips", "min")
    )
    table = per_target.groupby(level=["run", "round", "kind"], sort=False).agg(
        targets=("ssim", "size"), psnr=("psnr", "mean"), ssim=("ssim", "mean"), lpips=("lpips", "mean")
    )
    return table.reset_index()[columns]


def accuracy_by_round(rounds: pd.DataFrame, names: dict[str, str], max_rows: int = 21) -> tuple[pd.DataFrame, int]:
    """Test accuracy as round x run (columns by short name), thinned to about ``max_rows`` rows (the last kept).

    Returns the table and the step between the rounds shown.
    """
    wide = rounds.pivot_table(index="round", columns="run", values="accuracy", sort=False)
    wide = wide[[run for run in names if run in wide.columns]].rename(columns=names).sort_index()
    step = max(1, math.ceil(len(wide) / max_rows))
    keep = [i for i in range(len(wide)) if i % step == 0 or i == len(wide) - 1]
    return wide.iloc[keep].reset_index(), step


def final_utility(sweep: Sweep, rounds: pd.DataFrame) -> pd.DataFrame:
    """Per run: rounds completed, final accuracy, test loss, mean training loss and epsilon (last round's)."""
    rows = []
    for name in sweep.runs:
        own = rounds[rounds["run"] == name]
        last = own.iloc[-1] if not own.empty else None
        trained = own.dropna(subset=["train_loss"])
        rows.append(
            {
                "run": name,
                "rounds": int(last["round"]) if last is not None else 0,
                "final_accuracy": float(last["accuracy"]) if last is not None else math.nan,
                "final_loss": float(last["loss"]) if last is not None else math.nan,
                "final_train_loss": float(trained.iloc[-1]["train_loss"]) if not trained.empty else math.nan,
                "epsilon": float(own["epsilon"].max()) if own["epsilon"].notna().any() else math.nan,
            }
        )
    return pd.DataFrame(rows, columns=["run", "rounds", "final_accuracy", "final_loss", "final_train_loss", "epsilon"])


CENTRAL_DP = "central-dp"


def defense_settings(config: ExperimentConfig) -> list[tuple[str, dict[str, object]]]:
    """The run's defenses and their set parameters (None left out): client defenses in order, then central DP."""
    settings = [(defense.name, defense.model_dump(exclude={"name"})) for defense in config.client.defenses]
    if config.strategy.dp is not None:
        settings.append((CENTRAL_DP, config.strategy.dp.model_dump()))
    return [(name, {key: value for key, value in params.items() if value is not None}) for name, params in settings]


def parameter_text(params: dict[str, object]) -> str:
    return ", ".join(f"{key}={value}" for key, value in params.items())


def defense_text(config: ExperimentConfig) -> str:
    """The run's defenses in one line: client defenses with their parameters, then central DP."""
    return "; ".join(f"{name}({parameter_text(params)})" for name, params in defense_settings(config)) or "none"


def best_grids(run: Run, attacks: pd.DataFrame) -> list[tuple[str, Path]]:
    """The originals-over-reconstruction grids of a run's strongest result (highest SSIM) per target kind."""
    own = attacks[attacks["run"] == run.name].dropna(subset=["ssim"]) if not attacks.empty else attacks
    grids = []
    for kind in ("per-client", "aggregate"):
        rows = own[own["kind"] == kind] if not own.empty else own
        if rows.empty:
            continue
        best = rows.loc[rows["ssim"].idxmax()]
        path = run.path / RECONSTRUCTIONS_DIR / grid_file(int(best["round"]), str(best["target"]), str(best["attack"]))
        if path.is_file():
            psnr = "exact" if best["psnr"] >= PSNR_CAP_DB else f"PSNR {best['psnr']:.1f} dB"
            caption = (
                f"{kind}: round {int(best['round'])}, {best['target']}, {best['attack']}: "
                f"{psnr}, SSIM {best['ssim']:.3f}"
            )
            grids.append((caption, path))
    return grids
