"""The short table a run prints at its end: accuracy and, where attacked, leakage per target, per round.

For each attacked round and target the cell shows the result the attacker itself would report (the lowest
gradient match over the attacks run on it, ``fedsim.judge.verdict``), as ``PSNR/SSIM`` (PSNR in dB; an exact
reconstruction shows ``exact``); below it, its floor (the SSIM above which a score beats the guesses made without
the update at the test's level, ``fedsim.judge.floor``), its p-value, and the target's verdict: ``leaks`` when the
p-value is at most the level, ``at floor`` otherwise (the attacks failed there, which is no evidence of
protection), and ``—`` for rows written before calibrated verdicts. Where more than one attack ran, an ``oracle``
line gives the best SSIM against the ground truth, which no attacker has, beside its own best-of-N floor: an
upper bound that decides no verdict. A target whose every attack ran out of time
before its first iteration shows ``no-iterations`` instead of a score, with no floor or verdict, and a line under
the table says why.
A DP run adds the privacy spent by the end of each shown round, one column per guarantee
(``epsilon_example``: DP-SGD, add/remove one sample of a client; ``epsilon_client``: ``strategy.dp``,
add/remove one client), their deltas under the table.

Where the leakage cannot carry a verdict on a defense, the title says so: rows marked ``lower_bound`` (a client
defense in force that no running attack adapts to, or a leading attack that hit its budget cap under a defense)
and, under ``attacks: strongest``, targets whose leading attacks did not saturate (``capped``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedsim.engine.leakage.no_iterations import NO_ITERATIONS
from fedsim.judge.floor import UNKNOWN
from fedsim.judge.verdict import TargetVerdict, judge_target
from fedsim.reporting.text_table import is_text_row, print_text_leakage, run_text_rows
from fedsim.rundir.privacy import (
    ADJACENCY,
    DELTA_CLIENT,
    DELTA_EXAMPLE,
    EPSILON_CLIENT,
    EPSILON_EXAMPLE,
    epsilon_text,
    privacy_by_round,
    privacy_spent,
)
from fedsim.rundir.writer import RunStore


def _target_order(target: str) -> tuple[int, int]:
    return (1, 0) if target == "aggregate" else (0, int(target.split(":", 1)[1]))


def leakage_rows(run_dir: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """(target columns, one row per evaluated round) with ``round``, ``accuracy``, each epsilon spent by then
    (``epsilon_example``, ``epsilon_client``; None without that mechanism) and each target's pick (``PSNR/SSIM``),
    and under ``floor``, ``p``, ``verdict`` and ``oracle`` each attacked target's SSIM floor, p-value, verdict and,
    where several attacks ran, the oracle's ``SSIM/floor``."""
    rows = RunStore(run_dir).rows()
    spent = privacy_by_round(rows)
    results: dict[tuple[int, str], list[dict[str, Any]]] = {}
    unrun: set[tuple[int, str]] = set()  # attacked, but no attack ran an iteration there: nothing to score
    for row in rows:
        if row["event"] == "attack" and row.get("status") == NO_ITERATIONS:
            unrun.add((row["round"], row["target"]))
        if row["event"] == "attack" and row.get("status") == "ok" and not is_text_row(row):  # text: its own table
            results.setdefault((row["round"], row["target"]), []).append(row)
    judged = {key: verdict for key, found in results.items() if (verdict := judge_target(found)) is not None}
    targets = sorted({target for _, target in [*judged, *unrun]}, key=_target_order)
    attacked = {server_round for server_round, _ in [*judged, *unrun]}
    evals = [row for row in rows if row["event"] == "eval"]
    last = max((row["round"] for row in evals), default=0)
    table = []
    for row in evals:
        if row["round"] not in attacked and row["round"] not in (0, last):
            continue
        line: dict[str, Any] = {"round": row["round"], "accuracy": row.get("accuracy")}
        line.update({column: {} for column in CELL_LINES})
        for epsilon in EPSILONS:
            line[epsilon] = spent.get(row["round"], {}).get(epsilon)
        for target in targets:
            verdict = judged.get((row["round"], target))
            if verdict is None:
                line[target] = NO_ITERATIONS if (row["round"], target) in unrun else None
                continue
            line[target] = _score(verdict.pick)
            line["floor"][target] = _ssim_text(verdict.floor)
            line["p"][target] = "—" if verdict.p_value is None else f"{verdict.p_value:.3f}"
            line["verdict"][target] = verdict.verdict
            if verdict.candidates > 1:
                line["oracle"][target] = _oracle_text(verdict)
        table.append(line)
    return targets, table


#: the lines under each attacked round's scores, in the order printed
CELL_LINES = ("floor", "p", "verdict", "oracle")


def _ssim_text(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _oracle_text(verdict: TargetVerdict) -> str:
    return f"{verdict.oracle_ssim:.2f}/{_ssim_text(verdict.oracle_floor)}"


TITLE = "leakage per target: PSNR (dB)/SSIM"
EPSILONS = (EPSILON_EXAMPLE, EPSILON_CLIENT)
#: the console's short headers of the epsilon columns
EPSILON_HEADERS = {EPSILON_EXAMPLE: "ε ex", EPSILON_CLIENT: "ε cl"}  # short: the table fits 80 columns


def privacy_lines(run_dir: Path) -> list[str]:
    """Lines for under the table: each epsilon the run spent by its end, with its delta and what it protects
    (none for a run without DP)."""
    spent = privacy_spent(RunStore(run_dir).rows())
    return [
        f"{EPSILON_HEADERS[epsilon]}: {epsilon} {epsilon_text(spent[epsilon], spent[delta])}, {ADJACENCY[epsilon]}"
        for epsilon, delta in ((EPSILON_EXAMPLE, DELTA_EXAMPLE), (EPSILON_CLIENT, DELTA_CLIENT))
        if spent[epsilon] is not None
    ]


def no_iteration_lines(run_dir: Path) -> list[str]:
    """Lines for under the table: each attack whose time limit ran out before its first iteration, where, and why
    it has no score (none where every attack ran)."""
    unrun: dict[tuple[str, str], list[str]] = {}  # (attack, why) -> "round N target"
    for row in RunStore(run_dir).rows():
        if row["event"] == "attack" and row.get("status") == NO_ITERATIONS:
            unrun.setdefault((row["attack"], row.get("error", "")), []).append(f"round {row['round']} {row['target']}")
    return [f"{NO_ITERATIONS}: {', '.join(where)}: {why}" for (_, why), where in unrun.items()]


def selection_lines(run_dir: Path) -> tuple[str, str]:
    """The table's title and the line under it: how each cell was picked (the attacker's pick over N attacks, or
    the one attack that ran) and each attack's own mean SSIM over the targets it attacked (empty where one attack
    ran), with what the oracle line is."""
    attacked: dict[tuple[int, str], set[str]] = {}
    own: dict[str, list[float]] = {}
    for row in RunStore(run_dir).rows():
        if row["event"] == "attack" and row.get("status") == "ok" and row.get("ssim_mean") is not None:
            attacked.setdefault((row["round"], row["target"]), set()).add(row["attack"])
            own.setdefault(row["attack"], []).append(row["ssim_mean"])
    if len(own) == 1:  # one attack everywhere: nothing was selected
        return f"{TITLE} of {next(iter(own))}", ""
    if not own:
        return TITLE, ""
    counts = sorted({len(attacks) for attacks in attacked.values()})
    over = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    alone = ", ".join(f"{attack} {sum(values) / len(values):.2f}" for attack, values in sorted(own.items()))
    return (
        f"{TITLE} of the attacker's pick over {over} attacks (defense-aware attacks first, then lowest gradient match)",
        f"each attack alone, mean SSIM over its targets: {alone}. oracle: the best SSIM against the truth over the "
        "attacks / its best-of-N floor, an upper bound that decides no verdict",
    )


def bound_note(run_dir: Path) -> str:
    """Why the table's leakage is only a lower bound ("" where nothing says so): unsaturated leaders of a
    portfolio, and rows the run marked ``lower_bound``."""
    rows = [row for row in RunStore(run_dir).rows() if row["event"] == "attack" and row.get("status") == "ok"]
    reasons = []
    capped = sorted({row["attack"] for row in rows if row.get("saturation") == "capped"})
    if capped:
        reasons.append(f"not saturated ({', '.join(capped)} capped by adversary.budget)")
    if any(row.get("lower_bound") for row in rows) and not capped:
        reasons.append("a client defense that no running attack adapts to")
    return f"a lower bound: {'; '.join(reasons)}" if reasons else ""


def _level(run_dir: Path) -> float:
    """The verdicts' level as the run's rows recorded it (the default where none did)."""
    from fedsim.judge.floor import FLOOR_LEVEL

    for row in RunStore(run_dir).rows():
        if row["event"] == "attack" and isinstance(row.get("floor_level"), (int, float)):
            return float(row["floor_level"])
    return FLOOR_LEVEL


def _score(row: Mapping[str, Any]) -> str:
    psnr = row.get("psnr_mean")
    return f"{'exact' if psnr is None else f'{psnr:.1f}'}/{row['ssim_mean']:.2f}"


def print_leakage_table(run_dir: Path, console: Any) -> None:
    """Print the table with rich (``console``: a ``rich.console.Console``): per attacked round, a line of scores,
    one of SSIM floors and one of verdicts, each a cell wide, so that the table fits 80 columns."""
    from rich.box import SIMPLE
    from rich.table import Table

    targets, table = leakage_rows(run_dir)
    title, alone = selection_lines(run_dir)
    note = bound_note(run_dir)
    level = _level(run_dir)
    heading = f"{title}; SSIM floor, p-value, verdict at {level:.0%}" + (
        f" ({note.upper()[:1]}{note[1:]})" if note else ""
    )
    if not targets and run_text_rows(run_dir):  # text attacked, no image: its leakage follows in its own tables
        heading = "test accuracy per round"
    # a run without DP keeps the table as narrow as before: no empty epsilon columns
    epsilons = [epsilon for epsilon in EPSILONS if any(line[epsilon] is not None for line in table)]
    view = Table(title=heading, caption=alone or None, box=SIMPLE)
    view.add_column("round", justify="right")
    view.add_column("accuracy", justify="right")
    for epsilon in epsilons:
        view.add_column(EPSILON_HEADERS[epsilon], justify="right")
    for target in targets:
        view.add_column(target, justify="right")
    for line in table:
        accuracy = line["accuracy"]
        cells = [str(line["round"]), "" if accuracy is None else f"{accuracy:.3f}"]
        cells += [epsilon_text(line[epsilon], None) if line[epsilon] is not None else "" for epsilon in epsilons]
        view.add_row(*cells, *(line[target] or "" for target in targets))
        if line["verdict"]:
            blank = [""] * len(epsilons)
            for name in CELL_LINES:
                if not line[name]:
                    continue
                texts = (line[name].get(target, "") for target in targets)
                view.add_row("", name, *blank, *("—" if text == UNKNOWN else text for text in texts))
    console.print(view)
    print_text_leakage(run_dir, console)
    for sentence in privacy_lines(run_dir) + no_iteration_lines(run_dir):  # whole lines: the table's width would
        console.print(sentence, soft_wrap=True)  # wrap them mid-phrase
