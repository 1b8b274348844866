"""``fedsim validate`` (a config or a sweep, checked without running it) and ``fedsim config-schema``."""

from __future__ import annotations

import argparse
import os

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def validate_command(args: argparse.Namespace) -> int:
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

        check_fits_machine(config.federation, config.adversary, usable_cpus(), usable_cpus(), machine_gpus())
    print(
        f"{args.config}: valid ({config.federation.num_clients} clients, {config.federation.rounds} rounds, "
        f"{config.data.dataset}, {config.model.name})"
    )
    from fedsim.engine.leakage.portfolio import verdict_warning

    warning = verdict_warning(config.adversary, config.client.defenses)
    if warning is not None:
        print(warning)
    return 0


def config_schema_command(args: argparse.Namespace) -> int:
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
