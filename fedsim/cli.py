"""The `fedsim` command line: run, audit, validate, sweep, config-schema, list, vulnerability, prior, report."""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import signal
import sys
from pathlib import Path
from typing import NoReturn

from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.table import Table

from fedsim.core.command_signals import ReportInterrupted, reporting_on, sigterm_interrupts
from fedsim.core.errors import ConfigError, ExternalFailure, RunInterrupted, TrainingFailed
from fedsim.core.notices import warnings_as_log_lines
from fedsim.core.stopping import exit_status

#: errors of the user's input that modules define: (module, class name)
MODULE_USER_ERRORS = (
    ("fedsim.data", "DataError"),
    ("fedsim.models", "ModelError"),
    ("fedsim.reporting", "ReportError"),
    ("fedsim.judge.metrics", "LpipsRequiredError"),
    ("fedsim.engine.deployment.submit", "DeploymentError"),
)


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors caused by the user's input, not our bugs: shown as one line, exit code 2.

    A module's error can only have been raised once the module is imported: those not imported yet are left
    out rather than imported here, so that a one-line error does not wait for the report's pandas and matplotlib.
    """
    defined = [
        getattr(sys.modules[module], name)
        for module, name in MODULE_USER_ERRORS
        if module in sys.modules and hasattr(sys.modules[module], name)
    ]
    return (ConfigError, FileNotFoundError, FileExistsError, *defined)


def _setup_logging(quiet: bool) -> None:
    handler: logging.Handler
    if quiet:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    else:
        handler = RichHandler(console=Console(stderr=True), show_path=False)
    logger = logging.getLogger("fedsim")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    warnings_as_log_lines()  # one line each, no echo of the source line that warned


def _cmd_run(args: argparse.Namespace) -> int:
    # importing torch, Flower and Ray takes seconds: a terminal sees it said while it happens (a transient status,
    # gone once done; nothing is printed where stderr is not a terminal, so an error stays one line)
    with _status("importing torch, Flower and Ray", quiet=args.quiet):
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
            _print_report(run_dir)
    print(run_dir)  # always the last line
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    from fedsim.engine.app_audit.preflight import preflight

    # a wrong folder, --run-config, audit file or --set value: said before the heavy imports
    preflight(args.app_dir, args.config, args.set, args.run_config)
    with _status("importing torch, Flower and Ray", quiet=args.quiet):
        from fedsim.engine.app_audit.runner import audit_app

    run_dir = audit_app(args.app_dir, args.config, args.set, args.run_config)
    if args.report:
        with reporting_on(run_dir):  # the run is complete: a stop now says so, and how to write the report
            _print_report(run_dir)
    print(run_dir)  # always the last line
    return 0


def _print_report(run_dir: Path) -> None:
    """Write the run's report, print its leakage table and the report's path."""
    from fedsim.reporting import write_report
    from fedsim.reporting.leakage_table import print_leakage_table

    written = write_report(run_dir)
    print_leakage_table(run_dir, Console())
    html = next((path for path in written if path.suffix == ".html"), None)
    if html is not None:
        print(f"report: {html}")


def _status(text: str, quiet: bool) -> contextlib.AbstractContextManager[object]:
    """A transient spinner with ``text`` on stderr while the block runs, where stderr is a terminal."""
    console = Console(stderr=True)
    if quiet or not console.is_terminal:
        return contextlib.nullcontext()
    return console.status(text)


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


def _cmd_validate(args: argparse.Namespace) -> int:
    from fedsim.config import SWEEP_SECTION, load_config, read_yaml

    if SWEEP_SECTION in read_yaml(args.config):
        from fedsim.sweep import plan_sweep

        plan = plan_sweep(args.config, overrides=args.set)
        print(
            f"{args.config}: valid sweep of {len(plan.points)} point(s) over "
            f"{', '.join(axis.key for axis in plan.axes)}"
        )
        return 0
    config = load_config(args.config, args.set)
    if not (config.federation.ray_address or os.environ.get("RAY_ADDRESS")):  # a run of its own on this machine
        from fedsim.engine.lifecycle.ray_resources import check_fits_machine, machine_gpus, usable_cpus

        check_fits_machine(config, usable_cpus(), usable_cpus(), machine_gpus())
    print(
        f"{args.config}: valid ({config.federation.num_clients} clients, {config.federation.rounds} rounds, "
        f"{config.data.dataset}, {config.model.name})"
    )
    from fedsim.engine.leakage.portfolio import verdict_warning

    warning = verdict_warning(config)
    if warning is not None:
        print(warning)
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
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


def _cmd_config_schema(args: argparse.Namespace) -> int:
    from fedsim.config.schema import plugin_schema, schema_markdown, schema_rows

    rows = plugin_schema(args.key) if args.key else schema_rows()
    if args.markdown:
        print(schema_markdown(rows), end="")
        return 0
    table = Table(box=None, show_lines=False)
    table.add_column("key", no_wrap=True)  # a key is what users copy: never cut it short
    table.add_column("type", overflow="fold")
    table.add_column("default", overflow="fold")
    table.add_column("description", overflow="fold")
    for row in rows:  # keys hold brackets, which rich would read as markup
        table.add_row(*(escape(cell) for cell in row))
    Console(width=200).print(table)
    return 0


def _attack_table() -> Table:
    """Attacks with their threat model, the defenses they adapt to and what they require."""
    from adversary import ATTACKS

    table = Table(
        "name",
        "threat model",
        "adapts to",
        "requires",
        "description",
        title="attacks (adversary.attacks; `strongest` = every one whose requirements hold)",
        title_justify="left",
        box=None,
    )
    for name, help_text in ATTACKS.describe().items():
        options = ATTACKS.config(name)
        server = "malicious server" if options.threat_model == "malicious" else "honest server / wire"
        table.add_row(name, server, ", ".join(options.adapts_to) or "-", options.requires or "-", help_text)
    return table


def _preset_table() -> Table:
    """Every attack's presets: the published settings `strongest` runs beside the defaults, with their source."""
    from adversary import ATTACKS

    table = Table(
        "attack@preset",
        "settings",
        "source",
        title=escape(
            "attack presets (adversary.attacks: [dlg@paper-003] or {name: dlg, preset: paper-003}; "
            "`strongest` runs each beside the defaults)"
        ),
        title_justify="left",
        box=None,
    )
    for name in ATTACKS.names():
        for preset, settings in ATTACKS.config(name).presets.items():
            table.add_row(f"{name}@{preset}", settings.summary, settings.source)
    return table


def _cmd_list(args: argparse.Namespace) -> int:
    from adversary import ATTACKS
    from adversary.inversion.regularizers import REGULARIZERS
    from adversary.priors import PRIORS
    from clients.defenses import DEFENSES
    from fedsim.data import DATASETS
    from fedsim.models import MODELS
    from strategies import STRATEGIES
    from strategies.dp import DP_MECHANISMS

    console = Console(width=160)
    registries = (
        ("data sets", DATASETS),
        ("models", MODELS),
        ("strategies", STRATEGIES),
        ("differential privacy (strategy.dp.kind)", DP_MECHANISMS),
        ("defenses (client.defenses)", DEFENSES),
        ("attacks", ATTACKS),
        ("regularizers (adversary.attacks[].regularizers)", REGULARIZERS),
        ("generative priors (the prior of ggssr; `fedsim prior train` makes one)", PRIORS),
    )
    for title, registry in registries:
        if registry is ATTACKS:
            console.print(_attack_table())
            console.print(_preset_table())
            continue
        table = Table("name", "description", title=title, title_justify="left", box=None)
        for name, help_text in registry.describe().items():
            table.add_row(registry.label(name), help_text)
        if registry is DEFENSES:  # defenses that are plain configuration, listed so that users find them
            table.add_row(
                "(client.local_steps)",
                "several local steps before sending (local aggregation, as in Data Reconstruction Attacks "
                "and Defenses: A Systematic Evaluation)",
            )
            table.add_row("(model.dropout)", "dropout in the model during local training")
        if not registry.names():
            table.add_row("(none yet)", "")
        console.print(table)
    table = Table("command", "description", title="model diagnostics", title_justify="left", box=None)
    table.add_row(
        "fedsim vulnerability CONFIG",
        "RV (Reconstruction Vulnerability, from Enhanced Privacy Leakage from Noise-Perturbed Gradients via "
        "Gradient-Guided Conditional Diffusion Models): Frobenius norm of d(parameter "
        "gradient)/d(input) of the run's initial model, from random orthogonal projections, with its standard "
        "error; larger = the update says more about the input",
    )
    console.print(table)
    return 0


def _cmd_vulnerability(args: argparse.Namespace) -> int:
    """RV (Reconstruction Vulnerability) of the run's initial global model on the first training images
    (see fedsim.judge.vulnerability)."""
    import torch

    from fedsim.config import load_config
    from fedsim.data import load_dataset
    from fedsim.engine.assembly import run_model_of
    from fedsim.judge.vulnerability import reconstruction_vulnerability

    config = load_config(args.config, args.set)
    data = load_dataset(config.data, seed=config.seed)
    model = run_model_of(config, data, config.seed, with_weights=True).eval()
    x, y = torch.from_numpy(data.x_train[: args.samples]), torch.from_numpy(data.y_train[: args.samples])
    result = reconstruction_vulnerability(model, x, y, projections=args.projections, seed=config.seed)
    print(
        f"model {config.model.name}: RV = {result.rv:.6g} +- {result.standard_error:.2g} (standard error; "
        f"{result.samples} samples x {result.projections} projections)"
    )
    return 0


def _cmd_prior_train(args: argparse.Namespace) -> int:
    """Train a diffusion prior on the data set's test split (no client holds those images)."""
    from adversary.priors.training import train_prior
    from fedsim.config import DataConfig
    from fedsim.data import load_dataset

    data = load_dataset(DataConfig(dataset=args.dataset, image_size=args.image_size), seed=args.seed)
    if len(data.x_test) == 0:
        raise ConfigError(f"--dataset {args.dataset}: it has no held-out test images to train a prior on")
    record = train_prior(
        data.x_test,
        args.out,
        dataset=args.dataset,
        split="test",
        preset=args.preset,
        steps=args.steps,
        seed=args.seed,
        resume=args.resume,
        threads=args.threads,
    )
    print(f"{args.out}: prior trained on {record.images} test images of {args.dataset} ({record.steps} steps)")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from fedsim.reporting import write_report

    for path in write_report(args.run_dir):
        print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedsim", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

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
    run.set_defaults(func=_cmd_run)

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
    audit.set_defaults(func=_cmd_audit)

    validate = sub.add_parser("validate", help="check a config without running it")
    validate.add_argument("config", type=Path)
    validate.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    validate.set_defaults(func=_cmd_validate)

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
    sweep.set_defaults(func=_cmd_sweep)

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
    schema.set_defaults(func=_cmd_config_schema)
    sub.add_parser("list", help="registered data sets, models, strategies and attacks").set_defaults(func=_cmd_list)

    vulnerability = sub.add_parser(
        "vulnerability",
        help="RV (Reconstruction Vulnerability): Frobenius norm of d(parameter gradient)/d(input) of the run's initial "
        "model on training images, from random orthogonal projections, with its standard error",
    )
    vulnerability.add_argument("config", type=Path)
    vulnerability.add_argument("--projections", type=int, default=8, help="orthogonal directions per image")
    vulnerability.add_argument("--samples", type=int, default=16, help="training images (each its own gradient)")
    vulnerability.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    vulnerability.set_defaults(func=_cmd_vulnerability)

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
    train.set_defaults(func=_cmd_prior_train)

    report = sub.add_parser(
        "report",
        help="HTML + Markdown + CSV report of a run, a sweep or a folder of runs: utility and leakage "
        "over rounds, privacy-utility frontier, reconstructions, configs",
    )
    report.add_argument("run_dir", type=Path, metavar="RUN_DIR|SWEEP_DIR")
    report.set_defaults(func=_cmd_report)
    return parser


#: options that count something (steps, threads, runs, CPUs, images, rounds): 1 or more when given
COUNT_OPTIONS = ("rounds", "parallel", "cpus", "projections", "samples", "image_size", "steps", "threads")


def check_counts(args: argparse.Namespace) -> None:
    """One line for the first count below 1 (``--steps 0`` once trained the preset's 3,000 steps)."""
    for name in COUNT_OPTIONS:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} = {value}; allowed: 1 or more")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(getattr(args, "quiet", False))
    try:
        check_counts(args)
        return args.func(args)
    except _user_errors() as error:
        print(f"fedsim: error: {error}", file=sys.stderr)
        return 2
    except TrainingFailed as error:  # the run and its rows exist; it could not train
        print(f"fedsim: error: the run could not train: {error}", file=sys.stderr)
        return 1
    except ExternalFailure as error:  # Ray's start, an audited app: one line naming the log with the details
        print(f"fedsim: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as interrupt:
        print(f"fedsim: {_interrupted(args, interrupt)}", file=sys.stderr)
        return exit_status(getattr(interrupt, "signum", None) or signal.SIGINT)
    except OSError as error:
        from fedsim.core.failure_log import pointer_to, write_failure_log
        from fedsim.rundir.refused_writes import WRITE_FAILURES, refused_write_line

        if error.errno not in WRITE_FAILURES:
            raise
        # the line says what failed and what to do; the traceback behind it goes to a log, not the console
        log = write_failure_log(error, args.command)
        line = refused_write_line(error, args.command, getattr(args, "resume", None), getattr(args, "run_dir", None))
        print(f"fedsim: error: {line}{pointer_to(log)}", file=sys.stderr)
        return 1


def _interrupted(args: argparse.Namespace, interrupt: KeyboardInterrupt) -> str:
    """What Ctrl-C leaves: the run directory to resume when there is one, never a placeholder."""
    if isinstance(interrupt, RunInterrupted | ReportInterrupted):  # it said where it stopped and what is left
        return str(interrupt)
    run_dir = getattr(args, "resume", None)
    if args.func is not _cmd_run:
        return "interrupted"
    if run_dir is not None:
        return f"interrupted; resume with `fedsim run --resume {run_dir}`"
    if args.engine == "deployment":  # the SuperLink's run may go on: its directory is on that machine
        return "interrupted"
    return "interrupted before the first round; nothing to resume"


def entry() -> NoReturn:
    """The ``fedsim`` command: ``main``, then an exit that skips the interpreter's last garbage collection.

    A run leaves a large heap behind (torch, Ray, Flower): walking it on the way out kept the process, with
    nothing left to do, alive for seconds after its last line. Nothing in it needs collecting: every file is
    written and closed, every child process stopped, before ``main`` returns."""
    sigterm_interrupts()  # SIGTERM where no run handles it: one line and 143, as Ctrl-C, not killed without a word
    status = main()
    gc.freeze()
    sys.exit(status)


if __name__ == "__main__":
    entry()
