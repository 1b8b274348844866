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


def test_the_report_lists_attacks_that_ran_no_iteration_with_their_status_and_scores_none_of_them(tmp_path):
    from fedsim.rundir.writer import RunStore

    why = "time_limit = 2 s ran out before ig's first iteration finished: nothing to score"
    unrun = {"event": "attack", "tap": "mitm", "attack": "ig", "status": "no-iterations", "cut": True, "error": why}
    mixed = RunStore(_synthetic_run(tmp_path, "mixed"))
    mixed.append({**unrun, "round": 2, "target": "client:1", "iterations": 0})
    unrun_only = RunStore(_synthetic_run(tmp_path / "alone", "unrun"))
    unrun_only.run_dir.joinpath("metrics.jsonl").write_text("")  # no scored attack at all
    for r in (0, 1):
        unrun_only.append({"round": r, "event": "eval", "loss": 1.0, "accuracy": 0.5})
    unrun_only.append({**unrun, "round": 1, "target": "aggregate", "iterations": 0})
    assert main(["report", str(tmp_path / "mixed")]) == 0 and main(["report", str(tmp_path / "alone")]) == 0
    for rendered in (tmp_path / "mixed/report/report.md", tmp_path / "mixed/report/report.html"):
        text = rendered.read_text()
        assert "no-iterations" in text and "time_limit = 2 s ran out before ig" in text
    attacks = pd.read_csv(tmp_path / "mixed/report/attacks.csv")
    assert "ig" not in set(attacks["attack"])  # no score, no verdict: not an attack result
    alone = (tmp_path / "alone/report/report.md").read_text()
    assert "No attack result was scored." in alone
    assert "no-iterations: no attack finished an iteration within its time limit, nothing to score" in alone


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


def test_a_strength_sweep_gets_a_line_per_defense_and_the_equal_utility_table(tmp_path):
    # (defense settings, final accuracy, SSIM of the strongest attack) at seeds 0 and 1
    settings = {
        "none": ([], 0.80, 0.9),
        "noise-0.01": ([{"name": "noise", "sigma": 0.01}], 0.79, 0.6),
        "noise-0.1": ([{"name": "noise", "sigma": 0.1}], 0.72, 0.2),
        "prune-0.5": ([{"name": "prune", "ratio": 0.5}], 0.80, 0.8),
    }
    for name, (defenses, accuracy, ssim) in settings.items():
        for seed in (0, 1):
            _synthetic_run(tmp_path, f"{name}-{seed}", defenses=defenses, accuracy=accuracy, ssim=ssim, seed=seed)
    assert main(["report", str(tmp_path)]) == 0
    report = tmp_path / "report"
    points = pd.read_csv(report / "defense_curves.csv")
    points = points.set_index(points["setting"].str.split(",").str[0])
    # seeds are replicates of one point; drops in points of accuracy against the undefended run of each seed
    assert list(points["seeds"]) == [2, 2, 2, 2]
    assert points.loc["sigma=0.1", "accuracy_drop_points"].startswith("8.00 [")
    assert points.loc["sigma=0.01", "strongest_ssim"].startswith("0.600 [")
    assert (report / "defense_curves.png").stat().st_size > 0
    markdown = (report / "report.md").read_text()
    assert "Each defense over its strengths" in markdown
    budgets = markdown[markdown.index("| defense | drop <= 1 points") :]
    noise = next(line for line in budgets.splitlines() if line.startswith("| noise |"))
    # within 1 point only sigma 0.01 (drop 1.0); within 10, sigma 0.1 leaks less
    assert "sigma=0.01" in noise.split("|")[2] and "drop 1.0" in noise.split("|")[2]
    assert "sigma=0.1" in noise.split("|")[4] and "drop 8.0" in noise.split("|")[4]


def test_runs_at_one_strength_per_defense_get_no_defense_curves(tmp_path):
    _synthetic_run(tmp_path, "none")
    _synthetic_run(tmp_path, "noise", defenses=[{"name": "noise", "sigma": 0.01}], ssim=0.5)
    assert main(["report", str(tmp_path)]) == 0
    assert not (tmp_path / "report" / "defense_curves.png").exists()
