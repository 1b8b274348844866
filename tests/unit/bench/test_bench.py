"""bench/ as a package: every benchmark imports and answers ``--help`` without data, none edits ``sys.path``, and the
shared pieces (the interval, the data folder, the docs tables) do what bench.common says."""

from __future__ import annotations

import importlib
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from bench import common

BENCH = Path(common.__file__).resolve().parent
MODULES = sorted(path.stem for path in BENCH.glob("*.py") if path.stem != "__init__")
HELPERS = {"common", "bare_flower_app"}  # imported by the benchmarks; not run on their own
BENCHMARKS = [name for name in MODULES if name not in HELPERS]


def test_the_package_lists_every_benchmark():
    listed = importlib.import_module("bench").__doc__
    assert all(f"``{name}``" in listed for name in MODULES)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_every_benchmark_answers_help_without_data(name, monkeypatch, capsys):
    monkeypatch.delenv(common.DATA_ENV, raising=False)
    module = importlib.import_module(f"bench.{name}")
    with pytest.raises(SystemExit) as stopped:
        module.main(["--help"])
    assert stopped.value.code == 0
    assert "usage:" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(HELPERS))
def test_helpers_import(name):
    assert not hasattr(importlib.import_module(f"bench.{name}"), "main")


def test_a_benchmark_runs_as_a_module():
    repo = BENCH.parent
    done = subprocess.run([sys.executable, "-m", "bench.defenses", "--help"], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "--data-dir" in done.stdout and "--docs" in done.stdout


def test_no_bench_file_edits_sys_path():
    offenders = [path.name for path in BENCH.glob("*.py") if "sys.path" in path.read_text()]
    assert offenders == []


def test_no_bench_file_points_outside_the_repository():
    outside = ("shared" + "/data", '"shared"', "parents[2]", "REPO.parent", '".."')
    offenders = [path.name for path in BENCH.glob("*.py") if any(text in path.read_text() for text in outside)]
    assert offenders == []


@pytest.mark.parametrize("values", [[1.0, 2.0, 4.0], [0.31, 0.35, 0.29, 0.4, 0.33], [12.5, 9.1]])
def test_interval_is_the_student_t_interval(values):
    mean, half = common.interval(values)
    low, high = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
    assert mean == pytest.approx(np.mean(values), rel=1e-12)
    assert mean - half == pytest.approx(low, rel=1e-12)
    assert mean + half == pytest.approx(high, rel=1e-12)


def test_interval_on_known_numbers():
    # 1, 2, 3: mean 2, s = 1, t(0.975, 2) = 4.302652729749464
    mean, half = common.interval([1.0, 2.0, 3.0])
    assert (mean, half) == pytest.approx((2.0, 4.302652729749464 / math.sqrt(3)), rel=1e-12)
    assert common.format_interval((mean, half), 2) == "2.00 ± 2.48"


def test_interval_of_one_value_has_no_half_width():
    mean, half = common.interval([0.5])
    assert mean == 0.5 and math.isnan(half)
    assert common.format_interval((mean, half), 3) == "0.500"


def test_data_file_without_folder_names_the_flag_the_variable_and_the_file(monkeypatch):
    monkeypatch.delenv(common.DATA_ENV, raising=False)
    with pytest.raises(SystemExit) as stopped:
        common.data_file(None, common.CIFAR)
    message = str(stopped.value.code)
    assert "\n" not in message
    assert "--data-dir" in message and common.DATA_ENV in message and common.CIFAR in message


def test_data_file_from_the_flag_or_the_variable(tmp_path, monkeypatch):
    (tmp_path / common.MNIST).write_bytes(b"")
    monkeypatch.setenv(common.DATA_ENV, str(tmp_path))
    assert common.data_file(None, common.MNIST) == (tmp_path / common.MNIST).resolve()
    monkeypatch.setenv(common.DATA_ENV, str(tmp_path / "elsewhere"))
    assert common.data_file(tmp_path, common.MNIST) == (tmp_path / common.MNIST).resolve()  # the flag wins


def test_data_file_missing_in_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(common.DATA_ENV, str(tmp_path))
    with pytest.raises(SystemExit) as stopped:
        common.data_file(None, common.CIFAR)
    message = str(stopped.value.code)
    assert common.DATA_ENV in message and common.CIFAR in message and "\n" not in message


def test_a_benchmark_without_data_stops_in_one_line(monkeypatch):
    monkeypatch.delenv(common.DATA_ENV, raising=False)
    strongest = importlib.import_module("bench.strongest")
    with pytest.raises(SystemExit) as stopped:
        strongest.main([])
    assert "--data-dir" in str(stopped.value.code) and common.CIFAR in str(stopped.value.code)


def test_write_between_markers_replaces_only_the_block(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n<!-- t:start -->\nold\n<!-- t:end -->\n\nafter\n")
    common.write_between_markers(page, "t", ["| a |", "| 1 |"])
    assert page.read_text() == "# Title\n\n<!-- t:start -->\n| a |\n| 1 |\n<!-- t:end -->\n\nafter\n"


def test_write_between_markers_without_markers_stops(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("no markers\n")
    with pytest.raises(SystemExit, match="t:start"):
        common.write_between_markers(page, "t", ["x"])
    assert page.read_text() == "no markers\n"


def test_docs_pages_sit_under_docs():
    tables = {"defense-table", "paper-results", "compare-table", "malicious-table", "closed-form-table"}
    assert set(common.DOCS_PAGES) == tables
    assert all(page.is_relative_to(common.REPO / "docs") for page in common.DOCS_PAGES.values())


def test_paired_psnr_pairs_caps_and_uses_adversary_metrics():
    from adversary.metrics import psnr

    truth = torch.rand(2, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    noisy = (truth + 0.1).clamp(0, 1)
    swapped = torch.stack([noisy[1], noisy[0]])  # the pairing undoes the order
    assert common.paired_psnr(swapped, truth) == pytest.approx(float(psnr(noisy, truth).mean()), rel=1e-12)
    assert common.paired_psnr(truth.clone(), truth) == 100.0  # exact: capped as the run's scores cap it
