"""bench.defense_screen: a cheap screen settles the cells that leak, and only the others go to full strength, each
stage at half the level so that a cell is wrongly called `leaks` at most at the stated rate."""

from pathlib import Path

import bench.defenses as defenses
from bench.defense_screen import (
    FULL,
    SCREEN,
    SCREEN_OPTIONS,
    STAGE_LEVEL,
    UNSETTLED,
    decided,
    decided_cell,
    full_strength_rounds,
    screen_attacks,
)
from bench.defense_table import equal_utility_cells
from bench.defenses import leakage_config
from fedsim.config import parse_config
from fedsim.judge.floor import FLOOR_LEVEL
from fedsim.judge.verdict import AT_FLOOR, LEAKS, judge_cell
from fedsim.reporting.equal_utility import StrengthPoint


def cell(leaking: int, targets: int = 30, seeds: int = 2) -> dict:
    verdicts = ["leaks"] * leaking + ["at floor"] * (targets - leaking)
    return {"verdict": judge_cell(verdicts, STAGE_LEVEL), "seeds": seeds}


def test_the_screen_runs_inverting_gradients_and_the_adaptive_attack_of_each_defense_in_force():
    assert [a["name"] for a in screen_attacks([])] == ["ig"]
    assert [a["name"] for a in screen_attacks([{"name": "noise", "sigma": 0.1}])] == ["ig", "ig-noise"]
    assert [a["name"] for a in screen_attacks([{"name": "gradient_dropout"}])] == ["ig", "ig-dropout"]
    assert all(a["iterations"] == SCREEN_OPTIONS["iterations"] for a in screen_attacks([{"name": "prune"}]))


def test_both_stages_together_stay_within_the_stated_false_positive_rate():
    assert 2 * STAGE_LEVEL <= FLOOR_LEVEL


def test_a_screen_sweep_lists_its_attacks_and_tests_at_the_stage_level(tmp_path: Path):
    models = {1: tmp_path / "pretrained.pt"}
    for path in [*models.values(), tmp_path / "federated.npz"]:
        path.touch()
    changes = {"defenses": [{"name": "prune", "ratio": 0.9}]}
    raw = leakage_config(tmp_path, changes, seed=0, models=models, screen=True)
    config = parse_config({key: value for key, value in raw.items() if key != "sweep"})
    assert [a.name for a in config.adversary.attacks] == ["ig", "ig-prune"]
    assert config.adversary.portfolio == "listed" and config.adversary.floor.level == STAGE_LEVEL
    full = parse_config({k: v for k, v in leakage_config(tmp_path, changes, 0, models).items() if k != "sweep"})
    assert full.adversary.portfolio == "strongest" and full.adversary.floor.level == STAGE_LEVEL


def test_only_finished_screen_cells_that_found_no_leak_go_to_full_strength():
    cells = {1: cell(leaking=20), 75: cell(leaking=0), 150: cell(leaking=0, targets=15, seeds=1)}
    assert full_strength_rounds(cells, rounds=(1, 75, 150), seeds=2) == [75]


def test_a_cell_is_judged_at_full_strength_where_it_ran_and_a_screen_that_found_nothing_settles_nothing():
    leaking, quiet, strong = cell(20), cell(0), cell(1)
    assert decided_cell(leaking, None) == {**leaking, "stage": SCREEN, "decided": True}
    assert decided_cell(quiet, None)["decided"] is False
    assert decided_cell(quiet, strong)["stage"] == FULL
    assert decided_cell(quiet, cell(1, targets=15, seeds=1))["stage"] == SCREEN  # full strength on one seed of two
    assert decided_cell(None, None) is None
    rounds = (1, 75, 150)
    screened = {"seeds": 2, "rounds": {r: decided_cell(quiet, None) for r in rounds}}
    assert not decided(screened, rounds)
    one_leaks = {"seeds": 2, "rounds": {1: decided_cell(leaking, None), 75: decided_cell(quiet, None)}}
    assert decided(one_leaks, rounds)
    all_full = {"seeds": 2, "rounds": {r: decided_cell(quiet, strong) for r in rounds}}
    assert decided(all_full, rounds) and not decided({"seeds": 2, "rounds": all_full["rounds"] | {}}, (1, 75, 150, 200))


def test_the_leakage_phase_screens_every_setting_and_sends_only_the_quiet_ones_to_full_strength(monkeypatch, tmp_path):
    sweeps: list[tuple[str, str]] = []
    monkeypatch.setattr(
        defenses, "fedsim_sweep", lambda raw, config, out, parallel: sweeps.append((out.parent.name, out.name))
    )
    monkeypatch.setattr(defenses, "utility_runs", lambda out, clients: {})  # no utility run: round 1 only
    monkeypatch.setattr(
        defenses, "round_cell", lambda rows: cell(sum(v == "leaks" for r in rows for v in r["verdicts"]), 30, len(rows))
    )
    screened = {
        "leaky": [{"seed": s, "round": 1, "verdicts": ["leaks"] * 10 + ["at floor"] * 5} for s in (0, 1)],
        "quiet": [{"seed": s, "round": 1, "verdicts": ["at floor"] * 15} for s in (0, 1)],
    }
    monkeypatch.setattr(defenses, "leakage_rows", lambda out, clients, seeds, folder: screened)
    clients = {"leaky": {"defenses": []}, "quiet": {"defenses": [{"name": "noise", "sigma": 0.1}]}}
    defenses.run_leakage(tmp_path, seeds=2, parallel=1, clients=clients, rounds=(1, 75, 150))
    screen = [("screen", f"{label}-seed-{s}") for s in (0, 1) for label in clients]
    assert sweeps == [*screen, ("sent", "quiet-seed-0"), ("sent", "quiet-seed-1")]


def test_an_equal_utility_cell_with_an_unsettled_strength_within_its_budget_waits_for_it():
    def point(setting: str, drop: float, leakage: float, verdict: str) -> StrengthPoint:
        return StrengthPoint("noise", setting, drop, leakage, f"{leakage}", 0.5, verdict)

    points = [
        point("sigma 0.003", 0.0, 0.6, LEAKS),
        point("sigma 0.03", 0.5, 0.2, UNSETTLED),
        point("sigma 0.1", 3.5, 0.1, AT_FLOOR),
    ]
    cells = equal_utility_cells(points)["noise"]
    # within 1 and 3 points the unsettled sigma 0.03 could still protect: the cell says it waits for it
    assert cells[1.0].setting == "sigma 0.03" and cells[3.0].verdict == UNSETTLED
    assert cells[10.0].setting == "sigma 0.03"  # sigma 0.1 is settled, but 0.03 might reach less at full strength
    settled = equal_utility_cells([points[0], points[2]])["noise"]
    assert settled[1.0].setting == "sigma 0.003" and settled[10.0].setting == "sigma 0.1"
