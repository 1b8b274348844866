"""`fedsim report` of a folder of runs: DP and attacks, or one line when there are no runs."""

import pandas as pd
import pytest
from synthetic_runs import _synthetic_run

from fedsim.cli import main


def test_report_of_a_folder_of_runs_with_dp_and_attacks(capsys, tmp_path):
    _synthetic_run(tmp_path, "none")
    _synthetic_run(tmp_path, "dp", defenses=[{"name": "dpsgd", "noise_multiplier": 1.0}], epsilons=[0.5, 0.7], ssim=0.1)
    assert main(["report", str(tmp_path)]) == 0
    report = tmp_path / "report"
    frontier = pd.read_csv(report / "frontier.csv").set_index("run")
    assert frontier.loc["dp", "baseline"] == "none" and frontier.loc["dp", "accuracy_drop"] == pytest.approx(0.0)
    assert frontier.loc["dp", "pareto_ssim"] and not frontier.loc["none", "pareto_ssim"]
    page = (report / "report.html").read_text()
    # utility and frontier figures (one attacked round: a leakage table, no curve); per run, its one grid twice:
    # as its strongest result on top of the gallery, and in the gallery of round 1
    assert page.count('src="data:image/png;base64,') == 2 + 2 * 2
    assert "epsilon" in (report / "report.md").read_text()
    assert not (report / "summary.md").exists()  # the single-run outputs only for a run directory


def test_a_folder_without_runs_is_one_line(capsys, tmp_path):
    code = main(["report", str(tmp_path)])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "no metrics.jsonl" in err


@pytest.fixture
def run_and_outside(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    return _synthetic_run(tmp_path, "run"), outside


def test_a_report_folder_symlinked_outside_the_run_is_refused_and_nothing_is_written_there(capsys, run_and_outside):
    run, outside = run_and_outside
    (run / "report").symlink_to(outside, target_is_directory=True)
    code = main(["report", str(run)])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1
    assert f"'{run / 'report'}' is a symlink to '{outside}'" in err
    assert list(outside.iterdir()) == []


def test_a_report_md_symlinked_outside_the_run_is_refused_and_nothing_is_written_there(capsys, run_and_outside):
    run, outside = run_and_outside
    (run / "report").mkdir()
    (run / "report" / "report.md").symlink_to(outside / "report.md")
    code = main(["report", str(run)])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1
    assert f"'{run / 'report' / 'report.md'}' is a symlink to '{outside / 'report.md'}'" in err
    assert list(outside.iterdir()) == []
    assert [path.name for path in (run / "report").iterdir()] == ["report.md"]  # refused before any write
