"""The command line's parser: one function per command adds its sub-parser, its options and the function it runs.

Every option's help is the command reference (docs/reference/cli.md is generated from it by docs/hooks.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from fedsim.cli.audit import audit_command
from fedsim.cli.config_commands import config_schema_command, validate_command
from fedsim.cli.diagnostics import prior_train_command, vulnerability_command
from fedsim.cli.listing import list_command
from fedsim.cli.report import report_command
from fedsim.cli.run import run_command
from fedsim.cli.sweep import sweep_command

#: the parser's description, the first line of `fedsim --help`
DESCRIPTION = (
    "The `fedsim` command line: run, audit, validate, sweep, config-schema, list, vulnerability, prior, report."
)


def build_parser() -> argparse.ArgumentParser:
    """The `fedsim` parser: each command's sub-parser, in the order `fedsim --help` lists them."""
    parser = argparse.ArgumentParser(prog="fedsim", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for add_command in (
        _add_run,
        _add_audit,
        _add_validate,
        _add_sweep,
        _add_config_schema,
        _add_list,
        _add_vulnerability,
        _add_prior,
        _add_report,
    ):
        add_command(sub)
    return parser


def _add_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`fedsim run`: a config, or --resume of a killed run; --engine deployment submits it to a SuperLink."""
    run = sub.add_parser("run", help="run an experiment (or --resume a killed one)")
    run.add_argument("config", nargs="?", type=Path, help="YAML config")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    run.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue a killed run from its last round")
    run.add_argument(
        "--report",
        action="store_true",
        help="after the run: write its HTML report and print accuracy and leakage per round",
    )
    run.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        help="with --resume: extend the run to N rounds (the only change a resumed run accepts)",
    )
    run.add_argument("--quiet", action="store_true", help="log lines only, no live display")
    run.add_argument(
        "--engine",
        choices=["simulation", "deployment"],
        default="simulation",
        help="simulation: Flower's simulation on this machine (or federation.ray_address's Ray cluster); "
        "deployment: submit to a running SuperLink and its SuperNodes (--superlink)",
    )
    run.add_argument(
        "--superlink",
        metavar="HOST:PORT",
        help="with --engine deployment: the SuperLink's Control API address (as for `flwr run`)",
    )
    run.add_argument(
        "--insecure",
        action="store_true",
        help="with --engine deployment: plain HTTP, for a SuperLink started with --insecure",
    )
    run.add_argument(
        "--root-certificates",
        type=Path,
        metavar="PEM",
        help="with --engine deployment: CA certificate that signed the SuperLink's TLS certificate "
        "(default: the system's CAs)",
    )
    run.set_defaults(func=run_command)


def _add_audit(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`fedsim audit`: a Flower app's folder under fedsim's adversary."""
    audit = sub.add_parser(
        "audit", help="run an existing Flower app, unedited, under Flower's simulation with fedsim's adversary"
    )
    audit.add_argument("app_dir", type=Path, metavar="APP_DIR", help="the Flower app's folder (its pyproject.toml)")
    audit.add_argument(
        "--config", type=Path, metavar="AUDIT.yaml", help="the audit config: the attacker's knowledge, the app's data"
    )
    audit.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override an audit config key")
    audit.add_argument(
        "--run-config", metavar="'k=v ...'", help="override the app's run config, as `flwr run --run-config` does"
    )
    audit.add_argument(
        "--report", action="store_true", help="after the audit: write its HTML report and print leakage per round"
    )
    audit.add_argument("--quiet", action="store_true", help="log lines only, no live display")
    audit.add_argument(  # the deployment engine is not offered: audits run under Flower's simulation only
        "--engine", choices=["simulation"], default="simulation", help="Flower's simulation engine on this machine"
    )
    audit.set_defaults(func=audit_command)


def _add_validate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`fedsim validate`: a config checked, not run."""
    validate = sub.add_parser("validate", help="check a config without running it")
    validate.add_argument("config", type=Path)
    validate.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    validate.set_defaults(func=validate_command)


def _add_sweep(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`fedsim sweep`: the grid, the sweep's folder, and how many runs at once."""
    sweep = sub.add_parser("sweep", help="run the cartesian product of config values, one run each, under one folder")
    sweep.add_argument(
        "config", nargs="?", type=Path, help="YAML config (its `sweep: {grid: ...}` section is the grid)"
    )
    sweep.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="sweep a key over values (YAML each; commas inside [] or {} do not split)",
    )
    sweep.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a key of every point")
    sweep.add_argument(
        "--out",
        type=Path,
        metavar="SWEEP_DIR",
        help="sweep directory (default: output.dir/<name>-sweep-<timestamp>); finished runs in it are skipped",
    )
    sweep.add_argument("--resume", type=Path, metavar="SWEEP_DIR", help="continue a sweep with its saved grid")
    sweep.add_argument(
        "--parallel",
        type=int,
        default=1,
        metavar="N",
        help="runs at once, each in its own process with cpus/N CPUs for its Ray instance (default 1)",
    )
    sweep.add_argument(
        "--cpus",
        type=int,
        default=None,
        metavar="C",
        help="CPUs the sweep may use in all (default: every CPU this process may run on)",
    )
    sweep.add_argument("--dry-run", action="store_true", help="validate and list the points without running them")
    sweep.add_argument("--quiet", action="store_true", help="log lines only, no live display")
    sweep.set_defaults(func=sweep_command)


def _add_config_schema(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`fedsim config-schema`: every config key, or one section's or plugin's."""
    schema = sub.add_parser(
        "config-schema",
        help="print every config key (every registered plugin's too) with type, default and description",
    )
    schema.add_argument(
        "key",
        nargs="?",
        metavar="SECTION|PLUGIN",
        help="only this section or plugin, e.g. client.defenses.gradient_dropout or adversary.attacks[ig]",
    )
    schema.add_argument(
        "--markdown", action="store_true", help="Markdown tables (the docs' config reference, docs/reference/config.md)"
    )
    schema.set_defaults(func=config_schema_command)


def _add_list(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`fedsim list`: the registered plugins."""
    sub.add_parser("list", help="registered data sets, models, strategies and attacks").set_defaults(func=list_command)


def _add_vulnerability(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`fedsim vulnerability`: RV of a config's initial model."""
    vulnerability = sub.add_parser(
        "vulnerability",
        help="RV (Reconstruction Vulnerability): Frobenius norm of d(parameter gradient)/d(input) of the run's initial "
        "model on training images, from random orthogonal projections, with its standard error",
    )
    vulnerability.add_argument("config", type=Path)
    vulnerability.add_argument("--projections", type=int, default=8, help="orthogonal directions per image")
    vulnerability.add_argument("--samples", type=int, default=16, help="training images (each its own gradient)")
    vulnerability.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    vulnerability.set_defaults(func=vulnerability_command)


def _add_prior(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`fedsim prior train`: a diffusion prior on a data set's held-out images."""
    prior = sub.add_parser("prior", help="generative priors for attacks such as ggssr").add_subparsers(
        dest="prior_command", required=True
    )
    train = prior.add_parser("train", help="train a small diffusers UNet prior on a data set's held-out test images")
    train.add_argument("--dataset", default="digits")
    train.add_argument("--image-size", type=int, default=8)
    train.add_argument(
        "--preset", choices=["cpu", "gpu"], default="cpu", help="cpu: digits in minutes; gpu: CIFAR-10 size"
    )
    train.add_argument("--steps", type=int, default=None, help="training steps (default: the preset's)")
    train.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the held-out split and of training (a run with another seed holds out other images)",
    )
    train.add_argument("--threads", type=int, default=None, help="torch threads while training (default: the preset's)")
    train.add_argument("--resume", action="store_true", help="continue the training saved in OUT")
    train.add_argument("--out", type=Path, required=True, help="folder of the diffusers checkpoint")
    train.set_defaults(func=prior_train_command)


def _add_report(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`fedsim report`: the report of a run, a sweep or a folder of runs."""
    report = sub.add_parser(
        "report",
        help="HTML + Markdown + CSV report of a run, a sweep or a folder of runs: utility and leakage "
        "over rounds, privacy-utility frontier, reconstructions, configs",
    )
    report.add_argument("run_dir", type=Path, metavar="RUN_DIR|SWEEP_DIR")
    report.set_defaults(func=report_command)
