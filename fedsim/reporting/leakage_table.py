"""The short table a run prints at its end: accuracy and, where attacked, leakage per target, per round.

For each attacked round and target the strongest attack's result is shown (highest SSIM over the attacks
run on it, a result above its floor before any other), as ``PSNR/SSIM`` (PSNR in dB; an exact
reconstruction shows ``exact``), then the target's verdict against its floor, the SSIM a guess from public
data alone reaches on the same images (``adversary.floor``): ``leaks (floor 0.31)`` when some attack on it
scored above its floor, ``at floor (0.31)`` when none did (the attacks failed there, which is no evidence
of protection), and ``—`` for rows written before floors existed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adversary.floor import LEAKS, UNKNOWN, target_verdict, verdict_of
from fedsim.rundir.writer import RunStore


def _target_order(target: str) -> tuple[int, int]:
    return (1, 0) if target == "aggregate" else (0, int(target.split(":", 1)[1]))


def leakage_rows(run_dir: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """(target columns, one row per evaluated round) with ``round``, ``accuracy`` and each target's best attack."""
    rows = RunStore(run_dir).rows()
    best: dict[tuple[int, str], dict[str, Any]] = {}
    verdicts: dict[tuple[int, str], set[str]] = {}

    def strength(row: dict[str, Any]) -> tuple[bool, float]:
        # a leaking result first: attacks with more candidates than images (rtf) are read against a higher floor
        return verdict_of(row) == LEAKS, row["ssim_mean"]

    for row in rows:
        if row["event"] != "attack" or row.get("status") != "ok":
            continue
        key = (row["round"], row["target"])
        verdicts.setdefault(key, set()).add(verdict_of(row))
        if key not in best or strength(row) > strength(best[key]):
            best[key] = row
    targets = sorted({target for _, target in best}, key=_target_order)
    attacked = {server_round for server_round, _ in best}
    evals = [row for row in rows if row["event"] == "eval"]
    last = max((row["round"] for row in evals), default=0)
    table = []
    for row in evals:
        if row["round"] not in attacked and row["round"] not in (0, last):
            continue
        line: dict[str, Any] = {"round": row["round"], "accuracy": row.get("accuracy")}
        for target in targets:
            hit = best.get((row["round"], target))
            line[target] = None if hit is None else _cell(hit, verdicts[(row["round"], target)])
        table.append(line)
    return targets, table


def _cell(row: dict[str, Any], verdicts: set[str]) -> str:
    psnr = row.get("psnr_mean")
    score = f"{'exact' if psnr is None else f'{psnr:.1f}'}/{row['ssim_mean']:.2f}"
    verdict, floor = target_verdict(verdicts), row.get("floor_ssim")
    if verdict == UNKNOWN or floor is None:
        return f"{score} —"
    return f"{score} leaks (floor {floor:.2f})" if verdict == LEAKS else f"{score} at floor ({floor:.2f})"


def print_leakage_table(run_dir: Path, console: Any) -> None:
    """Print the table with rich (``console``: a ``rich.console.Console``)."""
    from rich.box import SIMPLE
    from rich.table import Table

    targets, table = leakage_rows(run_dir)
    view = Table(
        title="leakage per target: PSNR (dB)/SSIM of the strongest attack, "
        "verdict against the floor (SSIM of a guess from public data)",
        box=SIMPLE,
    )
    view.add_column("round", justify="right")
    view.add_column("accuracy", justify="right")
    for target in targets:
        view.add_column(target, justify="right")
    for line in table:
        accuracy = line["accuracy"]
        cells = [str(line["round"]), "" if accuracy is None else f"{accuracy:.3f}"]
        cells += [line[target] or "" for target in targets]
        view.add_row(*cells)
    console.print(view)
