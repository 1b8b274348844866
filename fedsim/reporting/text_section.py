"""The report's text section: for every text attack result, each sequence the target trained on beside the sequence
the attack recovered for it (the rows' ``texts``, paired by the scores in ``fedsim.engine.leakage.text_rows``)."""

from __future__ import annotations

import pandas as pd

from fedsim.reporting.render import ReportSection, Table, Text
from fedsim.rundir.layout import RECOVERED_TEXT_TABLE
from fedsim.rundir.sweep_reader import Sweep

TEXT_TITLE = "Recovered text: each original beside what the attack recovered"


def recovered_texts(sweep: Sweep) -> pd.DataFrame:
    """One row per (run, round, target, attack, sequence): the original and the recovered text, in the rows' order."""
    records = []
    for name, run in sweep.runs.items():
        attacks = run.events("attack")
        if attacks.empty or "texts" not in attacks:
            continue
        for row in attacks.to_dict("records"):
            texts = row.get("texts")
            if row.get("status") != "ok" or not isinstance(texts, list):
                continue
            key = {"run": name, "round": int(row["round"]), "target": row["target"], "attack": row["attack"]}
            records += [{**key, "original": pair["original"], "recovered": pair["recovered"]} for pair in texts]
    return pd.DataFrame(records, columns=["run", "round", "target", "attack", "original", "recovered"])


def text_section(sweep: Sweep) -> tuple[ReportSection, pd.DataFrame] | None:
    """The section and its table (None where no text attack result was recorded)."""
    texts = recovered_texts(sweep)
    if texts.empty:
        return None
    intro = Text(
        "Each sequence a target trained on (read on the scoring side, never by the attacker) beside the recovered "
        "sequence the scores paired it with; empty where the attack recovered none for it. The shares recovered, "
        "ROUGE, the floor and the verdict per target are in the leakage table."
    )
    return ReportSection(TEXT_TITLE, [intro, Table(texts, csv=RECOVERED_TEXT_TABLE, pinned=4)]), texts
