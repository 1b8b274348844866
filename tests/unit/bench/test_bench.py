"""bench/ as a package: every benchmark imports and answers ``--help`` without data, none edits ``sys.path``, and the
shared pieces (the summaries over seeds, the data folder, the docs tables) do what bench.common says."""

from __future__ import annotations

import importlib
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench import common
from fedsim.reporting import summaries

BENCH = Path(common.__file__).resolve().parent
MODULES = sorted(path.stem for path in BENCH.glob("*.py") if path.stem != "__init__")
#: imported by the benchmarks; not run on their own
HELPERS = {
    "common",
    "bare_flower_app",
    "breaching_driver",
    "defense_screen",
    "defense_setup",
    "defense_table",
    "dpsgd_tuning",
}
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


def test_interval_over_seeds_is_the_shared_bootstrap_and_stays_in_range():
    # three seeds of a bounded score that a t-interval took outside [0, 1]
    estimate = common.interval([0.9, 0.05, 0.05])
    assert estimate == summaries.mean([[0.9, 0.05, 0.05]])  # one code path: fedsim.reporting.summaries
    assert 0.0 <= estimate.low < estimate.value < estimate.high <= 0.9
    assert common.format_interval(estimate, 2) == estimate.text(2)


def test_interval_of_one_value_has_no_interval():
    estimate = common.interval([0.5])
    assert estimate.value == 0.5 and math.isnan(estimate.low)
    assert common.format_interval(estimate, 3) == "0.500"


def test_leakage_cells_summarise_images_over_seeds_and_name_the_selection():
    seed = {"compared": [3, 3], "winners": {"ig": 2}, "targets": 2}
    per_seed = [
        {**seed, "psnr": [None, 20.0], "ssim": [1.0, 0.4], "alone": {"ig": [1.0, 0.4], "dlg": [0.1, 0.2]}},
        {**seed, "psnr": [45.0, 35.0], "ssim": [0.9, 0.8], "alone": {"ig": [0.9, 0.8], "dlg": [0.3, 0.2]}},
    ]
    cells = common.leakage_cells(per_seed)
    assert cells["ssim"].startswith("0.775 [") and cells["compared"] == "3"
    assert cells["alone"] == "`ig` 0.775, `dlg` 0.200"  # strongest first
    assert cells["psnr"].startswith("40.0 [")  # median of 20, 35, 45 and an exact pair (at the cap)
    assert cells["at_30db"].startswith("0.75 [") and cells["at_40db"].startswith("0.50 [")
    assert cells["won"] == "`ig` 4"
    assert cells["floor"] == "-" and cells["leaking"] == "-"  # rows from before the floor


def test_leakage_cells_give_the_mean_floor_and_the_count_test_of_leaking_targets():
    seed = {"compared": [3], "winners": {"ig": 1}, "targets": 1, "psnr": [20.0], "ssim": [0.5], "alone": {}}
    per_seed = [
        {**seed, "floor": [0.3], "verdicts": ["leaks"]},
        {**seed, "floor": [0.5], "verdicts": ["at floor"]},
    ]
    cells = common.leakage_cells(per_seed)
    assert cells["floor"] == "0.400"
    # one leaking target of two is no evidence at 5 %: the count is tested, not just counted
    assert cells["leaking"].startswith("at floor: 1 of 2 targets [") and "underpowered" in cells["leaking"]


def test_leakage_cells_call_a_cell_leaks_only_when_its_count_beats_the_level():
    seed = {"compared": [3], "winners": {"ig": 1}, "targets": 1, "psnr": [20.0], "ssim": [0.5], "alone": {}}
    per_seed = [{**seed, "floor": [0.3], "verdicts": ["leaks"] * 2 + ["at floor"] * 28}]
    assert common.leakage_cells(per_seed, level=0.05)["leaking"].startswith("at floor: 2 of 30 targets")
    per_seed = [{**seed, "floor": [0.3], "verdicts": ["leaks"] * 6 + ["at floor"] * 24}]
    cell = common.leakage_cells(per_seed, level=0.05)["leaking"]
    assert cell.startswith("leaks: 6 of 30 targets") and "underpowered" not in cell


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
    tables = {
        "defense-table",
        "paper-results",
        "gradient-dropout-table",
        "compare-table",
        "malicious-table",
        "closed-form-table",
        "audit-table",
    }
    assert set(common.DOCS_PAGES) == tables
    assert all(page.is_relative_to(common.REPO / "docs") for page in common.DOCS_PAGES.values())


def test_paired_psnrs_pair_and_keep_exact_pairs_infinite():
    from fedsim.judge.metrics import psnr

    truth = torch.rand(2, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    noisy = (truth + 0.1).clamp(0, 1)
    swapped = torch.stack([noisy[1], noisy[0]])  # the pairing undoes the order
    assert common.paired_psnrs(swapped, truth) == pytest.approx(psnr(noisy, truth).tolist(), rel=1e-12)
    assert common.paired_psnrs(truth.clone(), truth) == [math.inf, math.inf]  # exact: summaries count the cap


def test_the_malicious_tables_summarise_every_image_by_median_and_fractions_not_a_capped_mean():
    from bench.malicious import cells

    # two repetitions of two images: one exact pair (+inf), one at 50 dB, one at 35 and one at 20
    cases = [
        {"psnr": [math.inf, 20.0], "ssim": [1.0, 0.2], "recovered_count": 1},
        {"psnr": [50.0, 35.0], "ssim": [0.9, 0.5], "recovered_count": 1},
    ]
    recovered, median, at_30, ssim = (cell.split(" [")[0] for cell in cells(cases).split(" | "))
    assert (recovered, median, at_30, ssim) == ("0.500", "42.5", "0.750", "0.650")
