"""The console table of text attack rows (``adversary.text_floor.text_row``), with each original beside its recovery."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

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
        table.add_row(str(row["target"]), str(row["attack"]), *cells, f"{row['p_value']:.3f}", str(row["verdict"]))
    return table


def recovered_beside_original(original: Sequence[str], recovered: Sequence[str], title: str = "") -> Table:
    """Original and recovered texts side by side, in the order given (pair them first)."""
    table = Table(title=title or None)
    table.add_column("original")
    table.add_column("recovered")
    for truth, guess in zip(original, recovered):
        table.add_row(truth, guess)
    return table
