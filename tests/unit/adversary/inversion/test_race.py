"""The raced portfolio: every attack starts small, each target's leaders by gradient match get more, the others are
eliminated at the rung they fell behind at, and the leaders are saturated as in the unraced portfolio."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from adversary.inversion import race as race_module
from adversary.inversion.race import kept, portfolio, race_portfolio, rung_iterations, rung_restarts
from adversary.inversion.saturation import NOT_LEADING, SATURATED, SaturationBudget
from adversary.view import Reconstruction
from fedsim.config import AttackOptions


def result(objective: float, iterations: int) -> Reconstruction:
    return Reconstruction(
        images=torch.full((1, 1, 1, 1), objective),
        labels=torch.zeros(1, dtype=torch.int64),
        objective=objective,
        restart_objectives=(objective,),
        iterations=iterations,
        seconds=0.0,
    )


def attack_with_quality(per_target: list[float]):
    """A toy attack whose objective on target t is ``per_target[t] / iterations`` (more iterations help, up to
    400): the yardstick below is that objective. Records (iterations, targets) of every call."""
    asked: list[tuple[int, tuple[int, ...]]] = []

    def run(options, targets=None) -> list[Reconstruction]:
        chosen = list(range(len(per_target))) if targets is None else list(targets)
        asked.append((options.iterations, tuple(chosen)))
        return [result(per_target[t] / min(options.iterations, 400), options.iterations) for t in chosen]

    return run, asked


def objective_yardstick(monkeypatch):
    monkeypatch.setattr(race_module, "gradient_match", lambda views, recs, device: [rec.objective for rec in recs])


def test_rungs_grow_by_the_growth_factor_up_to_the_attacks_own_budget():
    assert [rung_iterations(4800, rung, 3, 2) for rung in range(4)] == [600, 1200, 2400, 4800]
    assert rung_iterations(10, 0, 8, 2) == 1
    # one restart before the last rung, so that an 8-restart preset competes at the compute of the others
    assert [rung_restarts(8, rung, 3) for rung in range(4)] == [1, 1, 1, 8]
    assert [rung_restarts(3, rung, 3) for rung in range(4)] == [1, 1, 1, 3]
    # each rung keeps half of the ranked attacks, never fewer than the finalists: 7 -> 4 -> 2 -> 1 with one
    assert [kept(7, 1, 2), kept(4, 1, 2), kept(2, 1, 2)] == [4, 2, 1]
    assert [kept(7, 2, 2), kept(4, 2, 2), kept(3, 2, 2), kept(1, 2, 2)] == [4, 2, 2, 1]


def test_a_losing_attack_is_eliminated_at_the_first_rung_and_never_runs_its_full_budget(monkeypatch):
    objective_yardstick(monkeypatch)
    views = [SimpleNamespace(input_bounds=None)] * 2
    good, good_asked = attack_with_quality([1.0, 1.0])
    fair, fair_asked = attack_with_quality([2.0, 2.0])
    bad, bad_asked = attack_with_quality([50.0, 50.0])
    options = AttackOptions(name="dlg", iterations=400)
    entries = [(options, good), (options, fair), (options, bad)]
    budget = SaturationBudget(leaders=2, finalists=2, rungs=2, max_iterations=1600, max_restarts=2)
    outcomes = race_portfolio(entries, views, budget, torch.device("cpu"))
    assert bad_asked == [(100, (0, 1))]  # rung 0 only: a quarter of its budget
    assert [rec.eliminated_at for rec in outcomes[2]] == [0, 0]
    assert all(rec.saturation == NOT_LEADING and rec.iterations == 100 for rec in outcomes[2])
    # the two finalists skip the middle rung (the race is down to them) and run their own budget, then saturate
    assert good_asked[:2] == [(100, (0, 1)), (400, (0, 1))] and fair_asked[:2] == good_asked[:2]
    assert all(rec.saturation == SATURATED and rec.eliminated_at is None for rec in outcomes[0] + outcomes[1])


def test_each_target_races_on_its_own_and_an_attack_runs_only_where_it_is_still_in_the_race(monkeypatch):
    objective_yardstick(monkeypatch)
    views = [SimpleNamespace(input_bounds=None)] * 2
    first_on_0, asked_0 = attack_with_quality([1.0, 9.0])
    first_on_1, asked_1 = attack_with_quality([9.0, 1.0])
    middling, asked_mid = attack_with_quality([5.0, 5.0])
    options = AttackOptions(name="dlg", iterations=400)
    entries = [(options, first_on_0), (options, first_on_1), (options, middling)]
    budget = SaturationBudget(leaders=1, rungs=2, max_iterations=1600, max_restarts=2)
    outcomes = race_portfolio(entries, views, budget, torch.device("cpu"))
    # after rung 0 each target keeps its best two (half of three, rounded up); after rung 1 its best one
    assert asked_0[:3] == [(100, (0, 1)), (200, (0,)), (400, (0,))]
    assert asked_1[:3] == [(100, (0, 1)), (200, (1,)), (400, (1,))]
    assert asked_mid == [(100, (0, 1)), (200, (0, 1))]
    assert [rec.eliminated_at for rec in outcomes[2]] == [1, 1]
    assert outcomes[0][1].eliminated_at == 0 and outcomes[0][0].saturation == SATURATED


def test_an_attack_failing_at_the_first_rung_is_reported_as_its_error_and_the_race_goes_on(monkeypatch):
    objective_yardstick(monkeypatch)
    views = [SimpleNamespace(input_bounds=None)]
    good, _ = attack_with_quality([1.0])

    def broken(options, targets=None):
        raise RuntimeError("out of memory")

    options = AttackOptions(name="dlg", iterations=400)
    budget = SaturationBudget(leaders=1, rungs=2, max_iterations=1600, max_restarts=2)
    outcomes = race_portfolio([(options, good), (options, broken)], views, budget, torch.device("cpu"))
    assert isinstance(outcomes[1], RuntimeError) and outcomes[0][0].saturation == SATURATED


def test_without_rungs_the_portfolio_runs_every_attack_at_its_full_budget_first(monkeypatch):
    from adversary.inversion import saturation

    monkeypatch.setattr(saturation, "gradient_match", lambda views, recs, device: [rec.objective for rec in recs])
    views = [SimpleNamespace(input_bounds=None)]
    good, _ = attack_with_quality([1.0])
    bad, bad_asked = attack_with_quality([50.0])
    options = AttackOptions(name="dlg", iterations=400)
    budget = SaturationBudget(leaders=1, rungs=0, max_iterations=1600, max_restarts=2)
    outcomes = portfolio([(options, good), (options, bad)], views, budget, torch.device("cpu"))
    assert bad_asked == [(400, (0,))] and outcomes[1][0].eliminated_at is None


def test_a_raced_portfolio_job_of_real_attacks_records_the_rung_an_attack_fell_behind_at(digits):
    from digit_views import client_view, lenet

    from adversary.workers import PortfolioJob, _load, run_portfolio_job

    x, y = digits
    view = client_view(lenet(), x[:1], y[:1])
    attacks = [
        (AttackOptions(name="dlg", iterations=8, init_scale=0.05), 1),
        (AttackOptions(name="ig", iterations=8), 2),
        (AttackOptions(name="idlg", iterations=8, init_scale=0.05), 3),
    ]
    budget = SaturationBudget(leaders=1, rungs=1, max_iterations=16, max_restarts=1)
    outcomes = _load(run_portfolio_job(PortfolioJob(attacks, [view], budget).to_bytes()))
    eliminated = [recs[0] for recs in outcomes if recs[0].eliminated_at is not None]
    finalists = [recs[0] for recs in outcomes if recs[0].eliminated_at is None]
    # rung 0 (4 iterations) is the cut before the own budgets: it keeps the one finalist, which runs its own 8 and
    # is the leader the saturation step takes
    assert [(rec.eliminated_at, rec.iterations) for rec in eliminated] == [(0, 4), (0, 4)]
    assert [rec.saturation == NOT_LEADING for rec in finalists] == [False]
    assert all(rec.iterations >= 8 for rec in finalists)
    assert all(recs[0].gradient_match is not None for recs in outcomes)


def test_strongest_races_by_default_and_a_config_option_runs_the_full_portfolio_first():
    from adversary.adversary import saturation_budget
    from fedsim.config import AdversaryConfig

    raced = saturation_budget(AdversaryConfig(attacks="strongest"))
    unraced = saturation_budget(AdversaryConfig(attacks="strongest", budget={"race": False}))
    assert raced is not None and raced.rungs == 3 and raced.finalists == 1
    assert unraced is not None and unraced.rungs == 0
    assert saturation_budget(AdversaryConfig(attacks=["dlg"])) is None  # a listed portfolio runs its attacks as listed


def test_with_one_finalist_the_race_halves_down_to_the_one_attack_that_runs_its_full_budget(monkeypatch):
    objective_yardstick(monkeypatch)
    views = [SimpleNamespace(input_bounds=None)]
    runs = [attack_with_quality([quality]) for quality in (1.0, 2.0, 3.0, 4.0)]
    options = AttackOptions(name="dlg", iterations=400, restarts=4)
    budget = SaturationBudget(leaders=2, rungs=2, max_iterations=1600, max_restarts=8)
    outcomes = race_portfolio([(options, run) for run, _ in runs], views, budget, torch.device("cpu"))
    asked = [record for _, record in runs]
    # 4 -> 2 -> 1: rung 0 at 100 iterations, rung 1 at 200, and only the best runs its own 400 (then saturates)
    assert [len(record) for record in asked[2:]] == [1, 1] and len(asked[1]) == 2
    assert asked[0][:3] == [(100, (0,)), (200, (0,)), (400, (0,))]
    assert [outcome[0].eliminated_at for outcome in outcomes] == [None, 1, 0, 0]
    assert outcomes[0][0].saturation == SATURATED


def test_a_finalist_whose_last_rung_changed_no_answer_is_saturated_without_another_pass(monkeypatch):
    objective_yardstick(monkeypatch)
    views = [SimpleNamespace(input_bounds=None)] * 2
    converged_early, asked = attack_with_quality([1.0, 2.0])  # objective / min(iterations, 400): flat from 400 on
    losing, _ = attack_with_quality([50.0, 50.0])
    options = AttackOptions(name="dlg", iterations=800, restarts=2)
    budget = SaturationBudget(leaders=1, rungs=1, max_iterations=6400, max_restarts=8)
    outcomes = race_portfolio([(options, converged_early), (options, losing)], views, budget, torch.device("cpu"))
    # rung 0 (400 x 1), then the finalist's own budget (800 x 2), and no pass more: growing both iterations and
    # restarts from rung 0 changed neither target's answer
    assert [iterations for iterations, _ in asked] == [400, 800]
    assert all(rec.saturation == SATURATED for rec in outcomes[0])


def test_a_finalist_whose_last_rung_still_helped_gets_the_saturation_passes(monkeypatch):
    objective_yardstick(monkeypatch)
    views = [SimpleNamespace(input_bounds=None)]
    still_learning, asked = attack_with_quality([1.0])  # improves up to 400 iterations
    losing, _ = attack_with_quality([50.0])
    options = AttackOptions(name="dlg", iterations=200, restarts=2)
    budget = SaturationBudget(leaders=1, rungs=1, max_iterations=6400, max_restarts=8)
    outcomes = race_portfolio([(options, still_learning), (options, losing)], views, budget, torch.device("cpu"))
    assert [iterations for iterations, _ in asked][:3] == [100, 200, 400]  # rung 0, own budget, a saturation pass
    assert outcomes[0][0].saturation == SATURATED and outcomes[0][0].iterations == 400


def test_the_cut_before_the_last_rung_leaves_only_the_finalists_however_many_attacks_started(monkeypatch):
    objective_yardstick(monkeypatch)
    views = [SimpleNamespace(input_bounds=None)]
    runs = [attack_with_quality([float(quality)]) for quality in range(1, 10)]  # 9 attacks, the first the best
    options = AttackOptions(name="dlg", iterations=800)
    budget = SaturationBudget(leaders=2, rungs=3, max_iterations=1600, max_restarts=2)
    outcomes = race_portfolio([(options, run) for run, _ in runs], views, budget, torch.device("cpu"))
    # halving alone would go 9 -> 5 -> 3 -> 2; the last cut keeps the one finalist asked for
    assert [outcome[0].eliminated_at for outcome in outcomes] == [None, 2, 2, 1, 1, 0, 0, 0, 0]
    assert [iterations for iterations, _ in runs[1][1]] == [100, 200, 400]  # the runner-up never ran its own 800


def test_an_attack_built_for_the_defense_in_force_stays_in_the_race_though_generic_ones_match_the_update_better(
    monkeypatch,
):
    # pruning zeroes most entries: the generic attacks explain the zeros too and match the whole update better
    objective_yardstick(monkeypatch)
    views = [SimpleNamespace(input_bounds=None)]
    generic = [attack_with_quality([quality]) for quality in (1.0, 2.0, 3.0)]
    built_for_pruning, asked = attack_with_quality([9.0])
    entries = [(AttackOptions(name="ig", iterations=400), run) for run, _ in generic]
    entries.append((AttackOptions(name="ig-prune", iterations=400), built_for_pruning))
    budget = SaturationBudget(leaders=1, rungs=2, max_iterations=1600, max_restarts=2)
    outcomes = race_portfolio(entries, views, budget, torch.device("cpu"))
    assert outcomes[3][0].eliminated_at is None and asked[:3] == [(100, (0,)), (200, (0,)), (400, (0,))]
    assert [outcome[0].eliminated_at for outcome in outcomes[:3]] == [1, 0, 0]
