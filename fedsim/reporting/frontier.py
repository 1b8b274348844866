"""The privacy-utility frontier (paper 001's criterion): per defense setting, the strongest attack's leakage
against the utility it costs, and which settings no other setting beats on both.

Leakage of a run is its strongest attack over every attack, round and target run against it: the best
PSNR, the best SSIM and the lowest LPIPS. Utility loss is relative to the undefended run with otherwise
the same config: the drop in final test accuracy and the change in final training loss. A setting is
on the Pareto front when no other setting leaks less and costs less (at least as good in both, better
in one); the front is computed once per leakage metric, against the accuracy drop.

Each run also carries its ``verdict`` against the floor (``fedsim.judge.floor``): ``leaks`` when some attack result
scored above what a guess from public data reaches on the same images, ``at floor`` when none did. A run at
floor leaks less than the others only in numbers that mean nothing: its attacks failed, which is a lower bound
on leakage, never evidence that its defense protects.

A run whose model never learned (final accuracy within the constant predictor's interval, ``fedsim.reporting.chance``)
is flagged (``never_learned``) and kept off every front: it protects nothing that a model is worth.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import pandas as pd

from fedsim.config import ExperimentConfig
from fedsim.reporting.chance import ChanceLevel
from fedsim.reporting.tables import run_cell

Sense = Literal["min", "max"]

#: leakage metric -> (column in attack tables, whether the attacker wants it high or low)
LEAKAGE_METRICS: dict[str, tuple[str, Sense]] = {
    "psnr": ("psnr", "max"),
    "ssim": ("ssim", "max"),
    "lpips": ("lpips", "min"),
}
UTILITY_LOSS = "accuracy_drop"
#: config keys that make a run defended; a run's baseline is the run equal to it outside these (and `output`, `name`)
DEFENSE_KEYS = (("client", "defenses"), ("strategy", "dp"))


def pareto_front(table: pd.DataFrame, objectives: Mapping[str, Sense]) -> pd.Series:
    """True for the rows that no other row dominates on ``objectives`` (column -> "min" or "max").

    A row dominates another when it is at least as good on every objective and better on one. Rows with
    a missing (NaN) objective are never on the front and dominate nothing. Ties (equal rows) are all kept.
    """
    signs = {column: (1.0 if sense == "min" else -1.0) for column, sense in objectives.items()}
    values = [[signs[column] * float(row[column]) for column in objectives] for _, row in table.iterrows()]
    valid = [not any(math.isnan(v) for v in point) for point in values]

    def dominates(a: list[float], b: list[float]) -> bool:
        return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))

    front = [
        valid[i] and not any(valid[j] and j != i and dominates(values[j], values[i]) for j in range(len(values)))
        for i in range(len(values))
    ]
    return pd.Series(front, index=table.index, dtype=bool)


def is_undefended(config: ExperimentConfig) -> bool:
    return not config.client.defenses and config.strategy.dp is None


def baselines(configs: Mapping[str, ExperimentConfig]) -> dict[str, str | None]:
    """Each run's undefended reference: the undefended run whose config equals it outside the defenses.

    None where there is none (the sweep has no undefended run with otherwise the same settings).
    """
    undefended = {name: _without_defenses(config) for name, config in configs.items() if is_undefended(config)}
    return {
        name: next((ref for ref, ref_key in undefended.items() if ref_key == _without_defenses(config)), None)
        for name, config in configs.items()
    }


def _without_defenses(config: ExperimentConfig) -> str:
    dumped = config.model_dump(mode="json", exclude={"output", "name"})
    for section, key in DEFENSE_KEYS:
        dumped[section].pop(key, None)
    return repr(dumped)


def strongest_attack(attacks: pd.DataFrame) -> dict[str, float]:
    """Best PSNR, best SSIM and lowest LPIPS over every row of one run's attack table (NaN when none)."""
    out: dict[str, float] = {}
    for metric, (column, sense) in LEAKAGE_METRICS.items():
        values = (
            pd.to_numeric(attacks[column], errors="coerce").dropna()
            if column in attacks
            else pd.Series([], dtype=float)
        )
        out[f"best_{metric}"] = float(values.max() if sense == "max" else values.min()) if len(values) else math.nan
    return out


def frontier_table(
    utility: pd.DataFrame,
    attacks: pd.DataFrame,
    reference: Mapping[str, str | None],
    chance: Mapping[str, ChanceLevel | None] | None = None,
) -> pd.DataFrame:
    """One row per run: its strongest attack's leakage, its utility loss, and whether it is on each front.

    ``utility``: one row per run (``run``, ``final_accuracy``, ``final_train_loss``); ``attacks``: one row per
    attack result (``run``, ``psnr``, ``ssim``, ``lpips``); ``reference``: run -> its undefended run (or None);
    ``chance``: run -> its test set's chance level (None, or a run left out: not known, nothing flagged).
    ``chance_accuracy`` is the constant predictor's accuracy, ``never_learned`` whether the run's final accuracy
    is within its interval; such a run is on no front.
    """
    chance = chance or {}
    by_run = utility.set_index("run")
    rows: list[dict[str, Any]] = []
    for run in utility["run"]:
        ref = reference.get(run)
        own = attacks[attacks["run"] == run] if "run" in attacks else attacks.iloc[0:0]
        row: dict[str, Any] = {"run": run, "baseline": ref, "attack_results": len(own), **strongest_attack(own)}
        # the run as one cell: its targets' verdicts (the attacker's picks) counted and tested (fedsim.judge.verdict)
        row["verdict"] = run_cell(own).verdict
        row["final_accuracy"] = by_run.at[run, "final_accuracy"]
        level = chance.get(run)
        row["chance_accuracy"] = level.majority_rate if level is not None else math.nan
        accuracy = row["final_accuracy"]
        row["never_learned"] = bool(level is not None and not pd.isna(accuracy) and level.never_learned(accuracy))
        row["final_train_loss"] = by_run.at[run, "final_train_loss"]
        if ref is not None and ref in by_run.index:
            row[UTILITY_LOSS] = by_run.at[ref, "final_accuracy"] - row["final_accuracy"]
            row["train_loss_increase"] = row["final_train_loss"] - by_run.at[ref, "final_train_loss"]
        else:
            row[UTILITY_LOSS] = row["train_loss_increase"] = math.nan
        rows.append(row)
    table = pd.DataFrame(rows)
    learned = table[~table["never_learned"]] if len(table) else table
    for metric, (_, sense) in LEAKAGE_METRICS.items():
        # the defender wants the attacker's best PSNR/SSIM low and its best LPIPS high: the opposite sense
        defender: Sense = "min" if sense == "max" else "max"
        front = pareto_front(learned, {f"best_{metric}": defender, UTILITY_LOSS: "min"})
        table[f"pareto_{metric}"] = front.reindex(table.index, fill_value=False).astype(bool)
    return table
