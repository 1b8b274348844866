"""The report's text section: every text attack result's originals beside what it recovered, in a table and a CSV;
runs without text attack rows get no such section."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from fedsim.reporting.render import Table, render_html
from fedsim.reporting.text_section import text_section


def run_with(rows: list[dict]) -> SimpleNamespace:
    return SimpleNamespace(events=lambda event: pd.DataFrame(rows) if event == "attack" else pd.DataFrame())


def text_row(target: str, pairs: list[tuple[str, str]], status: str = "ok") -> dict:
    texts = [{"original": original, "recovered": recovered} for original, recovered in pairs]
    return {"round": 2, "event": "attack", "target": target, "attack": "dager", "status": status, "texts": texts}


def test_each_original_is_listed_beside_its_recovery_per_target():
    rows = [
        text_row("client:0", [("the values", "the values"), ("get useful", "")]),
        text_row("aggregate", [("flatten unions", "flatten unions among")]),
        text_row("client:1", [("never shown", "x")], status="failed"),
    ]
    section, texts = text_section(SimpleNamespace(runs={"text-demo": run_with(rows)}))
    assert texts[["target", "original", "recovered"]].values.tolist() == [
        ["client:0", "the values", "the values"],
        ["client:0", "get useful", ""],
        ["aggregate", "flatten unions", "flatten unions among"],
    ]
    (table,) = [block for block in section.blocks if isinstance(block, Table)]
    assert table.csv == "recovered_text.csv"
    assert "flatten unions among" in render_html("report", [section])


def test_image_runs_have_no_text_section():
    image_rows = [{"round": 1, "event": "attack", "target": "client:0", "attack": "dlg", "status": "ok"}]
    assert text_section(SimpleNamespace(runs={"images": run_with(image_rows)})) is None
