"""``fedsim run``: a new run from a config, or ``--resume`` of a killed one, in simulation or on a SuperLink."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedsim.cli import report
from fedsim.cli.console import status
from fedsim.core.command_signals import reporting_on
from fedsim.core.errors import ConfigError


def run_command(args: argparse.Namespace) -> int:
    # importing torch, Flower and Ray takes seconds: a terminal sees it said while it happens (a transient status,
    # gone once done; nothing is printed where stderr is not a terminal, so an error stays one line)
    with status("importing torch, Flower and Ray", quiet=args.quiet):
        from fedsim.config import load_config
        from fedsim.engine.run import run_experiment

    if args.resume is not None:
        if args.config is not None or args.set:
            raise ConfigError("--resume continues a run with its own saved config; drop CONFIG and --set")
    else:
        if args.config is None:
            raise ConfigError("run: give a CONFIG file (e.g. configs/quickstart.yaml) or --resume RUN_DIR")
        if args.rounds is not None:
            raise ConfigError("--rounds extends a resumed run; for a new run use --set federation.rounds=N")
    if args.engine == "deployment":
        run_dir = _run_deployed(args)
    elif args.superlink is not None or args.insecure or args.root_certificates is not None:
        raise ConfigError("--superlink, --insecure and --root-certificates go with --engine deployment")
    elif args.resume is not None:
        run_dir = run_experiment(resume=args.resume, rounds=args.rounds, quiet=args.quiet)
    else:
        run_dir = run_experiment(load_config(args.config, args.set), quiet=args.quiet)
    if args.report:
        with reporting_on(run_dir):  # the run is complete: a stop now says so, and how to write the report
            report.print_report(run_dir)
    print(run_dir)  # always the last line
    return 0


def _run_deployed(args: argparse.Namespace) -> Path:
    """Submit the run to a SuperLink (fedsim.engine.deployment.submit) and wait for it."""
    import shlex

    from fedsim.config import load_config
    from fedsim.engine.deployment.run_config import RunRequest
    from fedsim.engine.deployment.submit import SuperLink, planned_run_dir, resume_request, submit

    if args.superlink is None:
        raise ConfigError("--engine deployment: give --superlink HOST:PORT, the SuperLink's Control API address")
    if args.insecure and args.root_certificates is not None:
        raise ConfigError("--insecure and --root-certificates exclude each other (plain HTTP, or TLS with that CA)")
    command = shlex.join(["fedsim", *sys.argv[1:]])
    if args.resume is not None:
        request = resume_request(args.resume.resolve(), args.rounds, command)
    else:
        config = load_config(args.config, args.set)
        request = RunRequest(config=config, run_dir=planned_run_dir(config), submitted_by=command)
    superlink = SuperLink(args.superlink, insecure=args.insecure, root_certificates=args.root_certificates)
    return submit(request, superlink)
