"""The report's tables, derived from loaded runs (fedsim.rundir.reader): one job, numbers only, no plotting.

Column conventions: ``run`` names the run directory; metric columns are floats (NaN where a run has no
value). A result's PSNR is the median over its images (``fedsim.reporting.summaries``), an exact pair counted at
the 100 dB cap (fedsim.judge.scoring.PSNR_CAP_DB).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from fedsim.judge.floor import AT_FLOOR, LEAKS, UNKNOWN
from fedsim.judge.scoring import PSNR_CAP_DB
from fedsim.judge.verdict import CellVerdict, TargetVerdict, judge_cell, judge_target, verdict_of
from fedsim.reporting import summaries
from fedsim.rundir.privacy import DELTA_CLIENT, DELTA_EXAMPLE, EPSILON_CLIENT, EPSILON_EXAMPLE, PRIVACY_COLUMNS
from fedsim.rundir.reader import SELECTED_OVER, Run
from fedsim.rundir.sweep_reader import Sweep

if TYPE_CHECKING:
    from fedsim.config import ExperimentConfig

AGGREGATE = "aggregate"


def numeric(frame: pd.DataFrame, column: str) -> pd.Series:
    """A column as floats (NaN where missing or not a number); all NaN when the column is absent."""
    if column not in frame:
        return pd.Series(math.nan, index=frame.index, dtype=float)
    return pd.to_numeric(frame[column], errors="coerce").astype(float)


def round_privacy(run: Run) -> pd.DataFrame:
    """Privacy spent by the end of each round, indexed by round: ``epsilon_example`` / ``delta_example``
    (DP-SGD, the largest client's) and ``epsilon_client`` / ``delta_client`` (``strategy.dp``), NaN where a
    mechanism is not in force; empty when no DP mechanism reports an epsilon.

    The one epsilon rule of every report (a run's ``rounds.csv`` and a sweep's tables and figures), that of
    ``summary.json`` too (``fedsim.rundir.privacy``); the two are never merged into one column.
    """
    return run.privacy().set_index("round")


def utility_rounds(sweep: Sweep) -> pd.DataFrame:
    """Per run and round: test accuracy and loss, mean training loss of the clients, and the privacy spent
    (``epsilon_example``, ``delta_example``, ``epsilon_client``, ``delta_client``; NaN without that mechanism)."""
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
        spent = round_privacy(run)
        for column in PRIVACY_COLUMNS:
            table[column] = table["round"].map(spent[column]).astype(float)
        table.insert(0, "run", name)
        frames.append(table)
    columns = ["run", "round", "accuracy", "loss", "train_loss", *PRIVACY_COLUMNS]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def attack_results(sweep: Sweep) -> pd.DataFrame:
    """One row per successful attack result: run, round, attack, target, target kind, the number of image pairs
    scored (``images``; NaN for older rows), PSNR (median over the images), SSIM, LPIPS (means), labels,
    and the floor (``fedsim.judge.floor``): SSIM, PSNR and label accuracy a guess from public data reaches on the same
    images, which baseline set it, and the verdict (``leaks`` / ``at floor``; ``unknown`` for older rows)."""
    columns = [
        "run",
        "round",
        "attack",
        "target",
        "kind",
        "batch_size",
        "images",
        "psnr",
        "ssim",
        "lpips",
        "label_accuracy",
        "floor_psnr",
        "floor_ssim",
        "floor_label_accuracy",
        "floor_source",
        "p_value",
        "verdict",
        # what the target's verdict needs beside: the attacker-side yardstick and the test per selection size
        "gradient_match",
        "adapts_to",
        "p_values",
        "floor_ssim_best_of",
        "floor_level",
    ]
    columns.append("lower_bound")  # the report marks such leakage (portfolio.verdict_warning)
    frames = []
    for name, run in sweep.runs.items():
        attacks = run.events("attack")
        if attacks.empty or "status" not in attacks:
            continue
        ok = attacks[attacks["status"] == "ok"]
        if ok.empty:
            continue
        # a result's PSNR is the median over its images (summaries: a capped mean mixes exact copies with blurs)
        psnr = [summaries.median_value(image_scores(ok.loc[[index]], "psnr"), cap=PSNR_CAP_DB) for index in ok.index]
        frames.append(
            pd.DataFrame(
                {
                    **_attack_keys(name, ok),
                    "batch_size": numeric(ok, "batch_size"),
                    "images": [_image_count(row) for row in ok.to_dict("records")],
                    "psnr": psnr,
                    "ssim": numeric(ok, "ssim_mean"),
                    "lpips": numeric(ok, "lpips_mean"),
                    "label_accuracy": numeric(ok, "label_accuracy"),
                    "floor_psnr": numeric(ok, "floor_psnr"),
                    "floor_ssim": numeric(ok, "floor_ssim"),
                    "floor_label_accuracy": numeric(ok, "floor_label_accuracy"),
                    "floor_source": ok.get("floor_source"),
                    "p_value": numeric(ok, "p_value"),
                    "verdict": [verdict_of(row) for row in ok.to_dict("records")],
                    "gradient_match": numeric(ok, "gradient_match"),
                    "adapts_to": ok.get("adapts_to"),
                    "p_values": ok.get("p_values"),
                    "floor_ssim_best_of": ok.get("floor_ssim_best_of"),
                    "floor_level": numeric(ok, "floor_level"),
                    # the run's leakage under a defense no running attack adapts to, or unsaturated: a lower bound
                    "lower_bound": ok["lower_bound"].fillna(False).astype(bool) if "lower_bound" in ok else False,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


UNSCORED_COLUMNS = ["run", "round", "attack", "target", "kind", "status", "error"]


def unscored_attacks(sweep: Sweep) -> pd.DataFrame:
    """Every attack result without a score, per run, round, attack and target: its ``status`` and why (``error``):
    ``no-iterations`` (its time limit ran out before its first iteration), ``failed`` (it raised), ``no-data``
    (the target trained on no sample that round)."""
    frames = []
    for name, run in sweep.runs.items():
        attacks = run.events("attack")
        if attacks.empty or "status" not in attacks:
            continue
        unscored = attacks[attacks["status"] != "ok"]
        if unscored.empty:
            continue
        frames.append(
            pd.DataFrame(
                {
                    **_attack_keys(name, unscored),
                    "status": unscored["status"],
                    "error": unscored.get("error", pd.Series("", index=unscored.index)).fillna(""),
                }
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=UNSCORED_COLUMNS)


def _attack_keys(run: str, attacks: pd.DataFrame) -> dict[str, Any]:
    """The columns that name an attack row: its run, round, attack, target and the target's kind."""
    return {
        "run": run,
        "round": attacks["round"].astype(int),
        "attack": attacks["attack"],
        "target": attacks["target"],
        "kind": ["aggregate" if target == AGGREGATE else "per-client" for target in attacks["target"]],
    }


def _image_count(row: dict) -> float:
    """How many (original, reconstruction) pairs an attack row scored: the length of its per-image SSIM."""
    images = row.get("ssim")
    return float(len(images)) if isinstance(images, list) and images else math.nan


#: leakage_rounds' count columns: how many targets have each verdict
VERDICT_COUNTS = {"leaking": LEAKS, "at_floor": AT_FLOOR, "no_floor": UNKNOWN}


def judged(rows: pd.DataFrame) -> TargetVerdict | None:
    """One target's verdict (``fedsim.judge.verdict.judge_target``) from its rows of ``attack_results``."""
    return judge_target(rows.to_dict("records"), score="ssim")


def target_verdicts(attacks: pd.DataFrame) -> pd.Series:
    """Each attacked target's verdict (the attacker's pick's, ``fedsim.judge.verdict``), indexed by run, round, kind
    and target."""
    if attacks.empty:
        return pd.Series(dtype=object)
    groups = attacks.groupby(["run", "round", "kind", "target"], sort=False)
    return (
        pd.Series(
            {key: (verdict.verdict if (verdict := judged(rows)) is not None else UNKNOWN) for key, rows in groups},
            dtype=object,
        )
        .rename_axis(["run", "round", "kind", "target"])
        .sort_index()
    )


def run_cell(attacks: pd.DataFrame) -> CellVerdict:
    """One run's attacked targets (every round and target of ``attack_results`` rows) as one cell: how many leak by
    the attacker's pick, and whether that many beats the level (``fedsim.judge.verdict.judge_cell``)."""
    if attacks.empty or "target" not in attacks:
        return judge_cell([])
    return judge_cell(list(target_verdicts(attacks)))


def verdict_counts(verdicts: pd.Series, run: str, server_round: int, kind: str) -> dict[str, object]:
    """How many of one run, round and target kind's targets have each verdict (VERDICT_COUNTS)."""
    try:
        mine = verdicts.loc[(run, server_round, kind)]
    except KeyError:
        mine = pd.Series(dtype=object)
    counts: dict[str, object] = {column: int((mine == verdict).sum()) for column, verdict in VERDICT_COUNTS.items()}
    # the cell: more leaking targets than guesses would give at the targets' level? (fedsim.judge.verdict.judge_cell)
    cell = judge_cell(list(mine))
    counts.update(leaking_low=cell.share_low, leaking_high=cell.share_high, cell_p_value=cell.p_value)
    counts["verdict"] = cell.verdict
    return counts


def leakage_rounds(sweep: Sweep, attacks: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per run, round and target kind: the leakage of the strongest attack on each target, summarised over the
    images of the attacked clients (``per-client``) or of the aggregate.

    The strongest attack per target is ``Run.strongest`` (highest SSIM against the ground truth: an oracle),
    and ``attacks`` says over how many attacks it picked. Its images are summarised by
    ``fedsim.reporting.summaries``: ``psnr`` is their median PSNR (dB, an exact pair at the 100 dB cap),
    ``psnr_at_30db`` and ``psnr_at_40db`` the fractions at or above those, ``ssim`` their mean SSIM with a
    bootstrap interval over the images (``ssim_low``, ``ssim_high``), ``lpips`` the targets' mean LPIPS. A row
    of an older version without per-image scores counts its target's mean as one image.

    ``leaking``, ``at_floor``, ``no_floor``: how many of those targets leak by the attacker's pick's test
    (``fedsim.judge.verdict``), how many stayed at floor, and how many were scored by an older fedsim without a test;
    read from ``attacks`` (``attack_results(sweep)``, computed when not given). ``leaking_low``/``leaking_high``:
    a 95 % interval on the share leaking; ``cell_p_value`` and ``verdict``: the binomial test of that count against
    the level, ``leaks`` when significant (``fedsim.judge.verdict.judge_cell``).
    """
    columns = [
        "run",
        "round",
        "kind",
        "targets",
        "attacks",
        "psnr",
        "psnr_at_30db",
        "psnr_at_40db",
        "ssim",
        "ssim_low",
        "ssim_high",
        "lpips",
        *VERDICT_COUNTS,
        "leaking_low",
        "leaking_high",
        "cell_p_value",
        "verdict",
    ]
    verdicts = target_verdicts(attack_results(sweep) if attacks is None else attacks)
    rows = []
    for name, run in sweep.runs.items():
        best = run.strongest("ssim_mean", per="round")
        if best.empty:
            continue
        best = best.assign(kind=["aggregate" if target == AGGREGATE else "per-client" for target in best["target"]])
        for (server_round, kind), picked in best.groupby(["round", "kind"], sort=False):
            # one run is one seed: its targets' images are resampled together
            psnr = summaries.summarize_psnr([image_scores(picked, "psnr")])
            ssim = summaries.mean([image_scores(picked, "ssim")])
            rows.append(
                {
                    "run": name,
                    "round": int(server_round),
                    "kind": kind,
                    "targets": len(picked),
                    "attacks": int(picked[SELECTED_OVER].max()),
                    "psnr": psnr.median.value,
                    "psnr_at_30db": psnr.at_least[30.0].value,
                    "psnr_at_40db": psnr.at_least[40.0].value,
                    "ssim": ssim.value,
                    "ssim_low": ssim.low,
                    "ssim_high": ssim.high,
                    "lpips": float(numeric(picked, "lpips_mean").mean()),
                    **verdict_counts(verdicts, name, int(server_round), kind),
                }
            )
    return pd.DataFrame(rows, columns=columns)


def image_scores(rows: pd.DataFrame, metric: str) -> list[float | None]:
    """The per-image ``metric`` ("psnr", "ssim") of attack rows, all rows' images in one list (None: an exact
    PSNR, as rows store it). A row without per-image scores (an older version) counts its mean as one image."""
    values: list[float | None] = []
    for _, row in rows.iterrows():
        images = row.get(metric)
        if isinstance(images, list) and images:
            values.extend(images)
            continue
        mean = row.get(f"{metric}_mean")
        if metric == "psnr" and (mean is None or pd.isna(mean)) and (row.get("psnr_exact") or 0) > 0:
            values.append(None)  # older rows left psnr_mean empty when every pair was exact
        elif mean is not None and not pd.isna(mean):
            values.append(float(mean))
    return values


def accuracy_by_round(rounds: pd.DataFrame, names: dict[str, str], max_rows: int = 21) -> tuple[pd.DataFrame, int]:
    """Test accuracy as round x run (columns by short name), thinned to about ``max_rows`` rows (the last kept).

    Returns the table and the step between the rounds shown.
    """
    wide = rounds.pivot_table(index="round", columns="run", values="accuracy", sort=False)
    wide = wide[[run for run in names if run in wide.columns]].rename(columns=names).sort_index()
    wide.columns.name = None  # else the pivot's "run" heads an empty column of its own
    step = max(1, math.ceil(len(wide) / max_rows))
    keep = [i for i in range(len(wide)) if i % step == 0 or i == len(wide) - 1]
    return wide.iloc[keep].reset_index(), step


def final_utility(sweep: Sweep, rounds: pd.DataFrame) -> pd.DataFrame:
    """Per run: rounds completed, final accuracy, test loss, mean training loss, and each epsilon with its delta
    by the last round that reported it (NaN without that mechanism)."""
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
                **_last_spent(own),
            }
        )
    columns = ["run", "rounds", "final_accuracy", "final_loss", "final_train_loss", *PRIVACY_COLUMNS]
    return pd.DataFrame(rows, columns=columns)


def _last_spent(rounds: pd.DataFrame) -> dict[str, float]:
    """Each epsilon and its delta in the last of ``rounds`` that reported that epsilon (NaN where none did)."""
    spent = dict.fromkeys(PRIVACY_COLUMNS, math.nan)
    for epsilon, delta in ((EPSILON_EXAMPLE, DELTA_EXAMPLE), (EPSILON_CLIENT, DELTA_CLIENT)):
        reported = rounds.dropna(subset=[epsilon])
        if not reported.empty:
            spent[epsilon], spent[delta] = float(reported.iloc[-1][epsilon]), float(reported.iloc[-1][delta])
    return spent


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
