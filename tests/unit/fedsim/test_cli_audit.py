"""`fedsim audit` as a tool: listed in `fedsim --help`, no engine offered that it refuses, and a wrong app folder or
--run-config said before torch, Flower and Ray load."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from flower_apps import QUICKSTART_APP
from repository import REPO_ROOT

from fedsim.cli import build_parser, main


def test_the_help_names_every_command_in_its_first_line(capsys):
    parser = build_parser()
    (commands,) = [action for action in parser._subparsers._group_actions if action.choices]
    with pytest.raises(SystemExit):
        main(["--help"])
    assert parser.description in capsys.readouterr().out.replace("\n", " ")
    named = set(re.findall(r"[\w-]+", parser.description))
    assert "audit" in commands.choices and [name for name in commands.choices if name not in named] == []


def test_the_deployment_engine_is_not_offered_to_an_audit(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_code:
        build_parser().parse_args(["audit", str(tmp_path), "--engine", "deployment"])
    assert exit_code.value.code == 2
    assert "argument --engine: invalid choice: 'deployment' (choose from 'simulation')" in capsys.readouterr().err


CALL_AND_REPORT_IMPORTS = """
import sys
from fedsim.cli import main
code = main(sys.argv[1:])
print(code, *sorted(name for name in ("torch", "ray", "flwr") if name in sys.modules))
"""


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["audit", "{empty}"], "no pyproject.toml there"),
        (["audit", str(QUICKSTART_APP), "--run-config", "batchsize=4"], "Key 'batchsize' is not present"),
    ],
)
def test_a_wrong_app_folder_or_run_config_fails_before_torch_and_ray_load(tmp_path, argv, error):
    argv = [part.format(empty=tmp_path) for part in argv]
    done = subprocess.run(
        [sys.executable, "-c", CALL_AND_REPORT_IMPORTS, *argv, "--quiet"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert error in done.stderr and "fedsim: error:" in done.stderr
    assert done.stdout.split() in (["2"], ["2", "flwr"])  # Flower's config parser only: neither torch nor Ray
