"""``fedsim sweep``: the cartesian product of config values, one run each, under one folder."""

from __future__ import annotations

import argparse
import signal
import sys

from fedsim.core.stopping import exit_status


def sweep_command(args: argparse.Namespace) -> int:
    from fedsim.sweep import plan_sweep, run_sweep

    plan = plan_sweep(args.config, overrides=args.set, grid=args.grid, out=args.out, resume=args.resume)
    if args.dry_run:
        for point in plan.points:
            print(plan.sweep_dir / point.name, " ".join(f"{k}={v}" for k, v in point.labels.items()))
        return 0
    try:
        outcomes = run_sweep(plan, parallel=args.parallel, cpus=args.cpus, quiet=args.quiet)
    except KeyboardInterrupt as interrupt:
        print(f"fedsim: interrupted; resume with `fedsim sweep --resume {plan.sweep_dir}`", file=sys.stderr)
        return exit_status(getattr(interrupt, "signum", None) or signal.SIGINT)
    print(plan.sweep_dir)
    failed = [outcome for outcome in outcomes if outcome.status == "failed"]
    for outcome in failed:
        print(f"fedsim: error: sweep point {outcome.name} failed: {outcome.error}", file=sys.stderr)
    busy = [outcome for outcome in outcomes if outcome.status == "busy"]
    for outcome in busy:  # another process runs it: not failed, still to run
        print(f"fedsim: error: sweep point {outcome.name} not run: {outcome.error}", file=sys.stderr)
    return 1 if failed or busy else 0
