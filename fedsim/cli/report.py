"""``fedsim report``, and the report that ``run --report`` and ``audit --report`` write when they finish."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console


def report_command(args: argparse.Namespace) -> int:
    from fedsim.reporting import write_report

    for path in write_report(args.run_dir):
        print(path)
    return 0


def print_report(run_dir: Path) -> None:
    """Write the run's report, print its leakage table and the report's path."""
    from fedsim.reporting import write_report
    from fedsim.reporting.leakage_table import print_leakage_table

    written = write_report(run_dir)
    print_leakage_table(run_dir, Console())
    html = next((path for path in written if path.suffix == ".html"), None)
    if html is not None:
        print(f"report: {html}")
