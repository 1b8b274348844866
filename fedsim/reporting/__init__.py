"""`fedsim report RUN_DIR|SWEEP_DIR`: a run's, a sweep's or a folder of runs' report under ``<dir>/report/``.

One module a job: ``report`` writes the report (HTML, Markdown, CSV tables and figures) from its sections,
``summary_section`` (what leaked, per run), ``reconstructions_section`` (the gallery), ``rounds_sections`` (utility
and leakage over rounds), ``comparison_sections`` (the privacy-utility frontier, each defense over its strengths),
``runs_sections`` (the runs and their provenance); ``run_summary`` a run's own summary files, ``leakage_table`` the
console's leakage table, ``summaries`` the benchmarks' summaries. This package only names the public entry points.
"""

from __future__ import annotations

from fedsim.reporting.report import REPORT_FILES, load_for_report, report_dir, write_full_report, write_report
from fedsim.reporting.runs_sections import VERSION_KEYS
from fedsim.reporting.writable import ReportError

__all__ = [
    "REPORT_FILES",
    "VERSION_KEYS",
    "ReportError",
    "load_for_report",
    "report_dir",
    "write_full_report",
    "write_report",
]
