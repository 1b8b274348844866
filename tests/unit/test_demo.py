"""The first run: `make run` runs the bundled demo, which attacks every client and the aggregate."""

import shutil
import subprocess

import pytest
from repository import REPO_ROOT

from fedsim.config import load_config


def test_make_run_runs_the_demo_with_its_report():
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "CONFIG ?= configs/demo.yaml" in makefile and "fedsim run $(CONFIG) --report" in makefile


def test_the_demo_attacks_every_client_and_the_aggregate_on_bundled_data():
    config = load_config(REPO_ROOT / "configs" / "demo.yaml")
    assert config.data.dataset == "digits" and config.adversary.targets == "both" and config.adversary.attacks
    assert config.adversary.clients == "all"


def test_make_run_says_it_is_installing_and_how_long_that_takes_before_it_does(tmp_path):
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    # a dry run against an empty virtual environment: what a fresh clone's `make run` does first
    # --no-print-directory: under `make test` this make is nested, and would print its directory changes
    plan = subprocess.run(
        [make, "--no-print-directory", "-n", "run", f"VENV={tmp_path / 'venv'}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    installing = next(i for i, line in enumerate(plan) if "installing fedsim" in line)
    assert "minutes" in plan[installing] and "first time only" in plan[installing]
    assert installing < next(i for i, line in enumerate(plan) if "pip install --quiet -e" in line)
    assert plan[-1].endswith("fedsim run configs/demo.yaml --report")
