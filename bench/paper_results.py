"""The papers' results under fedsim's evaluation protocol, one table (``--docs``: into docs/results/papers.md).

Papers 000, 001 and 004 (``configs/papers/``) compare defense settings; here each setting is measured under
``bench.defenses``' protocol: utility of the federation that trains the public ``lenet-fc`` on MNIST for a fixed
number of rounds, one defended gradient per client and round; leakage of 2-image gradients on the models that
federation sent (round 1 and later rounds), every client of every seed attacked by the strongest attack, judged by
the calibrated test. Their settings overlap with the defense table's, so every setting runs once, in
``bench.defenses``' folders (``--out``, default ``runs/bench-defenses``; finished runs are skipped, so a killed
invocation resumes and the defense table's runs are reused; ``PAPER_EXTRAS`` adds the papers' settings it lacks).
A paper's DP-SGD at epsilon e is the table's DP-SGD at e, with its clipping norm and learning rate tuned on public
images (``bench.dpsgd_tuning``) rather than the paper's clipping norm. Paper 003's question (per client versus
aggregated) has its own table (``python -m bench.secagg compare``).

    .venv/bin/python -m bench.paper_results [--data-dir DIR] [--parallel 2] [--phase all|utility|screen|leakage]
                                            [--table-only] [--docs]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import yaml

from bench.common import (
    CONFIGS,
    DOCS_PAGES,
    MNIST,
    REPO,
    add_data_dir,
    add_docs_flag,
    data_file,
    write_between_markers,
)
from bench.defense_setup import DEFENSES, PAPER_EXTRAS, SOTERIA_LAYER, UTILITY_DEFENSES, settings_key
from bench.defense_table import COLUMNS_NOTE, column_names, row_cells
from bench.defenses import SENT_ROUNDS, client_settings, prepare, run_leakage, run_utility, tabulate

PAPERS = {"000": "000-dp-vs-pdp.yaml", "001": "001-defense-frontier.yaml", "004": "004-gradient-dropout.yaml"}
MARKER = "paper-results"
COMMAND = ".venv/bin/python -m bench.paper_results --data-dir DIR --parallel 2 --docs"
SETTINGS = {**DEFENSES, **PAPER_EXTRAS}
DEFENSES_WITHOUT_UTILITY = set(DEFENSES) - set(UTILITY_DEFENSES)


def on_lenet_fc(defenses: list[dict]) -> list[dict]:
    """A paper's defenses as they act on ``lenet-fc``: Soteria without a layer defends the model's first Linear,
    which is its representation layer (``SOTERIA_LAYER``), the setting the defense sweep runs."""
    return [{**d, "layer": SOTERIA_LAYER} if d["name"] == "soteria" and d.get("layer") is None else d for d in defenses]


def setting_of(defenses: list[dict]) -> str | None:
    """The label in ``SETTINGS`` that runs a paper's ``defenses`` (DP-SGD: the one at the same target epsilon)."""
    dpsgd = [d for d in defenses if d["name"] == "dpsgd"]
    for label, candidate in SETTINGS.items():
        if dpsgd and len(defenses) == 1:
            if [d.get("target_epsilon") for d in candidate if d["name"] == "dpsgd"] == [dpsgd[0]["target_epsilon"]]:
                return label
        elif settings_key(candidate) == settings_key(on_lenet_fc(defenses)):
            return label
    return None


def paper_table(paper: str, table: dict[str, dict], rounds: tuple[int, ...]) -> list[str]:
    """One paper's settings as rows; ``table``: ``bench.defenses.summarize``'s cells by label."""
    grid = yaml.safe_load((CONFIGS / "papers" / PAPERS[paper]).read_text())["sweep"]["grid"]["client.defenses"]
    lines = []
    for name, defenses in grid.items():
        label = setting_of(defenses)
        row = table.get(label) if label is not None else None
        if row is None:
            lines.append(f"| {paper} | {name} | not run |" + " |" * (3 + len(rounds)))
            continue
        lines.append(f"| {paper} | {name} | {label} | " + " | ".join(row_cells(label, row, rounds)) + " |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_dir(parser)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-defenses")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument(
        "--phase",
        choices=["all", "utility", "screen", "leakage"],
        default="all",
        help="as bench.defenses': utility runs only, the leakage screen only, or the screen then full strength",
    )
    parser.add_argument("--table-only", action="store_true", help="run nothing; tabulate the runs there are")
    add_docs_flag(parser, MARKER)
    args = parser.parse_args(argv)
    out, rounds = args.out.resolve(), SENT_ROUNDS
    _, public, checkpoint = prepare(data_file(args.data_dir, MNIST), out)
    clients = client_settings(out, public, checkpoint, SETTINGS)
    if not args.table_only and args.phase in ("all", "utility"):
        trained = {label: changes for label, changes in clients.items() if label not in DEFENSES_WITHOUT_UTILITY}
        run_utility(out, args.seeds, args.parallel, trained)
    if not args.table_only and args.phase in ("all", "screen", "leakage"):
        run_leakage(out, args.seeds, args.parallel, clients, rounds, full=args.phase != "screen")
    table = tabulate(out, clients, args.seeds)
    lines = [
        f"Regenerate with `{COMMAND}`, DIR holding `{MNIST}` (it reuses `bench.defenses`' runs and adds the "
        f"papers' settings they lack: {', '.join(PAPER_EXTRAS)}). Machine: {os.cpu_count()} CPU cores "
        f"({platform.machine()}), no GPU; generated {time.strftime('%Y-%m-%d')}.",
        "",
        "| paper | setting | as run | " + " | ".join(column_names(rounds)) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in column_names(rounds)) + " |",
        *[line for paper in PAPERS for line in paper_table(paper, table, rounds)],
        "",
        COLUMNS_NOTE,
    ]
    if args.docs:
        write_between_markers(DOCS_PAGES[MARKER], MARKER, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
