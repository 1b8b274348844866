"""The quick commands import only what they need: `--help` none of torch, Flower, Ray or pandas; `list`,
`validate`, `config-schema` and `sweep --dry-run` (which need the plugins' config models, and so torch) none
of Ray, pandas, matplotlib, opacus, torchvision or scipy. Checked on `sys.modules` after each command in a
fresh interpreter; how long they take is bench/startup.py's to measure, not a test's."""

import subprocess
import sys

from repository import REPO_ROOT

#: run each command as the `fedsim` entry point does, in this one interpreter, then name what is imported
PROBE = """
import contextlib, io, sys
from fedsim.cli import main
for command in sys.argv[1:]:
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(command.split())
        except SystemExit as done:  # --help
            code = done.code
    assert code == 0, (command, code)
print("imported:" + ",".join(sorted(m for m in ("torch", "flwr", "ray", "pandas", "matplotlib", "opacus", "torchvision",
                                  "scipy", "sklearn") if m in sys.modules)))
"""


def imported_after(*commands: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *commands], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("imported:")]
    return set(filter(None, line.removeprefix("imported:").split(",")))


def test_help_imports_neither_torch_nor_flower_nor_ray_nor_pandas():
    assert imported_after("--help", "run --help", "sweep --help") == set()


def test_the_config_commands_do_not_import_ray_pandas_or_what_only_a_run_uses(tmp_path):
    heavy = imported_after(
        "list",
        "validate configs/demo.yaml",
        "config-schema",
        f"sweep configs/papers/001-defense-frontier.yaml --dry-run --out {tmp_path / 'sweep'}",
    )
    assert not heavy & {"ray", "pandas", "matplotlib", "opacus", "torchvision", "scipy", "sklearn"}, heavy
