"""``fedsim audit``: an existing Flower app, unedited, under Flower's simulation with fedsim's adversary."""

from __future__ import annotations

import argparse

from fedsim.cli import report
from fedsim.cli.console import status
from fedsim.core.command_signals import reporting_on


def audit_command(args: argparse.Namespace) -> int:
    from fedsim.engine.app_audit.preflight import preflight

    # a wrong folder, --run-config, audit file or --set value: said before the heavy imports
    preflight(args.app_dir, args.config, args.set, args.run_config)
    with status("importing torch, Flower and Ray", quiet=args.quiet):
        from fedsim.engine.app_audit.runner import audit_app

    run_dir = audit_app(args.app_dir, args.config, args.set, args.run_config)
    if args.report:
        with reporting_on(run_dir):  # the run is complete: a stop now says so, and how to write the report
            report.print_report(run_dir)
    print(run_dir)  # always the last line
    return 0
