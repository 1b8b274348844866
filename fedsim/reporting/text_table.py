"""The console tables of text attack rows (``fedsim.judge.text_floor.text_row``), each original beside its recovery."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from fedsim.rundir.writer import RunStore

COLUMNS = (
    ("exact", "exact_mean"),
    ("tokens", "token_accuracy_mean"),
    ("ROUGE-1", "rouge1_mean"),
    ("ROUGE-2", "rouge2_mean"),
    ("ROUGE-L", "rougeL_mean"),
    ("floor ROUGE-L", "floor_rougeL"),
)


def _number(value: object) -> str:
    return "-" if value is None else f"{value:.3f}"


def text_leakage_table(rows: Sequence[dict[str, object]], title: str = "text leakage") -> Table:
    """One line per row (target x attack): shares recovered, ROUGE, the floor, p-value and verdict."""
    table = Table(title=title)
    for heading in ("target", "attack", *(name for name, _ in COLUMNS), "p", "verdict"):
        table.add_column(heading, justify="left" if heading in ("target", "attack", "verdict") else "right")
    for row in rows:
        cells = [_number(row.get(key)) for _, key in COLUMNS]
        table.add_row(str(row["target"]), str(row["attack"]), *cells, _number(row.get("p_value")), str(row["verdict"]))
    return table


def recovered_beside_original(original: Sequence[str], recovered: Sequence[str], title: str = "") -> Table:
    """Original and recovered texts side by side, in the order given (pair them first)."""
    table = Table(title=title or None)
    table.add_column("original")
    table.add_column("recovered")
    for truth, guess in zip(original, recovered):
        table.add_row(truth, guess)
    return table


def is_text_row(row: dict[str, Any]) -> bool:
    return row.get("event") == "attack" and row.get("modality") == "text"


def run_text_rows(run_dir: Path) -> list[dict[str, Any]]:
    """A run's scored text attack rows, by round, then clients before the aggregate."""
    rows = [row for row in RunStore(run_dir).rows() if is_text_row(row) and row.get("status") == "ok"]
    return sorted(rows, key=lambda row: (row["round"], row["target"] == "aggregate", row["target"], row["attack"]))


def print_text_leakage(run_dir: Path, console: Any) -> None:
    """Per attacked round, the text rows' scores, floor and verdict, then each target's originals beside their
    recoveries (nothing where the run attacked no text)."""
    rows = run_text_rows(run_dir)
    for server_round in sorted({row["round"] for row in rows}):
        found = [row for row in rows if row["round"] == server_round]
        level = next((row["floor_level"] for row in found if "floor_level" in row), None)
        test = f"; floor, p-value and verdict at {level:.0%}" if level is not None else ""
        console.print(text_leakage_table(found, title=f"round {server_round}: text recovered{test}"))
        for row in found:
            texts = row.get("texts") or []
            console.print(
                recovered_beside_original(
                    [pair["original"] for pair in texts],
                    [pair["recovered"] for pair in texts],
                    title=f"round {server_round} {row['target']} {row['attack']}",
                )
            )
