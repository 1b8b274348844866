"""The saturation step: leaders by an attacker-side yardstick, more budget until the attack's own objective stops
improving or the cap is reached, and every result says which."""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from adversary.inversion.saturation import (
    CAPPED,
    NOT_LEADING,
    SATURATED,
    SaturationBudget,
    leaders,
    moved,
    run_portfolio,
    saturate,
)
from adversary.view import Reconstruction
from fedsim.config import AttackOptions


def result(objective: float, iterations: int, cut: bool = False, pixel: float | None = None) -> Reconstruction:
    """A one-pixel reconstruction whose value is ``pixel`` (default: the objective, so that a better result moves)."""
    return Reconstruction(
        images=torch.full((1, 1, 1, 1), objective if pixel is None else pixel),
        labels=torch.zeros(1, dtype=torch.int64),
        objective=objective,
        restart_objectives=(objective,),
        iterations=iterations,
        seconds=0.0,
        cut=cut,
    )


def toy_attack(objective):
    """A toy attack: restart r at i iterations reaches ``objective(i, r)``; a run returns the best of the restarts
    it was asked for (``first_restart`` ..), and records what it was asked."""
    asked = []

    def run(options) -> list[Reconstruction]:
        ids = range(options.first_restart, options.first_restart + options.restarts)
        asked.append((options.iterations, options.first_restart, options.restarts))
        return [result(min(objective(options.iterations, r) for r in ids), options.iterations)]

    return run, asked


def plateau_at(iterations: int):
    """Better with every doubling of the iterations up to ``iterations``, then no better; restarts do not help."""
    return toy_attack(lambda i, r: 1.0 / min(i, iterations))


def test_saturation_doubles_the_iterations_then_the_restarts_until_neither_improves_the_objective():
    run, asked = plateau_at(800)
    options = AttackOptions(name="dlg", iterations=100, restarts=1)
    (rec,) = saturate(run, options, run(options), SaturationBudget(tolerance=0.01), seconds=None)
    # 200, 400, 800 iterations improve; 1600 does not, and one added restart at 800 neither: it stops there,
    # on the attack's own objective
    assert asked[1:] == [(200, 0, 1), (400, 0, 1), (800, 0, 1), (1600, 0, 1), (800, 1, 1)]
    assert rec.saturation == SATURATED
    assert rec.objective == 1.0 / 800
    assert rec.restarts == 1 and rec.iterations == 800  # the budget of the pass that gave the result


def test_a_pass_with_more_restarts_runs_only_the_added_ones_and_keeps_the_best_of_old_and_new():
    # restart 1 is the lucky one; more iterations never help
    run, asked = toy_attack(lambda i, r: 0.1 if r == 1 else 1.0)
    options = AttackOptions(name="dlg", iterations=400, restarts=1)
    (rec,) = saturate(run, options, run(options), SaturationBudget(tolerance=0.01), seconds=None)
    # restart 1 alone, then 2-3 alone; the iterations grow again over both restarts that helped
    assert asked[1:] == [(800, 0, 1), (400, 1, 1), (400, 2, 2), (800, 0, 2)]
    assert rec.saturation == SATURATED and rec.objective == 0.1 and rec.restarts == 2


def test_restarts_that_help_let_the_iterations_grow_again():
    # restart r reaches 1 / (min(i, 400) * (r + 1)) up to restart 3: better with more restarts and iterations
    run, asked = toy_attack(lambda i, r: 1.0 / (min(i, 400) * min(r + 1, 4)))
    options = AttackOptions(name="dlg", iterations=400, restarts=1)
    (rec,) = saturate(run, options, run(options), SaturationBudget(tolerance=0.01), seconds=None)
    assert asked[1:] == [(800, 0, 1), (400, 1, 1), (400, 2, 2), (400, 4, 4), (800, 0, 4)]
    assert rec.saturation == SATURATED and rec.objective == 1.0 / 1600


def test_an_objective_that_keeps_falling_while_the_image_no_longer_moves_has_saturated():
    # an attack that matches the update exactly: each doubling divides the objective by 100 (towards float
    # precision), but after 400 iterations its reconstruction moves by less than a thousandth of the input range
    def run(options) -> list[Reconstruction]:
        i = options.iterations
        return [result(100.0 ** -(i // 100), i, pixel=0.5 + max(0, 400 - i) / 1000 + 1e-6 * i / 100)]

    options = AttackOptions(name="dlg", iterations=100, restarts=1)
    budget = SaturationBudget(tolerance=0.01, resolution=1 / 255)
    (rec,) = saturate(run, options, run(options), budget, seconds=None, input_ranges=[torch.ones(1)])
    assert rec.saturation == SATURATED and rec.iterations == 800  # 800 and the added restart moved nothing visible
    # without the image criterion the same attack never saturates within the cap
    (capped,) = saturate(run, options, run(options), SaturationBudget(max_iterations=3200), seconds=None)
    assert capped.saturation == CAPPED


def test_moves_are_measured_as_a_fraction_of_each_channels_valid_range():
    before = torch.zeros(1, 2, 1, 1)
    after = torch.tensor([[[[0.2]], [[2.0]]]])  # 0.2 of a width-2 channel, 2.0 of a width-20 channel
    assert math.isclose(moved(before, after, torch.tensor([2.0, 20.0])), 0.1, rel_tol=1e-6)
    assert moved(before, after, None) == math.inf  # unknown range: any change counts


def test_saturation_that_reaches_the_cap_first_says_capped():
    run, asked = plateau_at(10_000)
    options = AttackOptions(name="ig", iterations=100, restarts=1)
    budget = SaturationBudget(max_iterations=400, max_restarts=2)
    (rec,) = saturate(run, options, run(options), budget, seconds=None)
    # the iterations reach their cap still improving; one more restart does not help: more iterations might
    assert asked[1:] == [(200, 0, 1), (400, 0, 1), (400, 1, 1)]
    assert rec.saturation == CAPPED and rec.objective == 1.0 / 400


def test_leaders_are_the_best_per_target_by_gradient_match():
    matches = [[0.5, 0.1], [0.2, 0.9], [None, None], [0.3, 0.05]]
    assert leaders(matches, 1) == {1, 3}
    assert leaders(matches, 2) == {0, 1, 3}


def test_leaders_put_the_attacks_built_for_a_defense_in_force_first():
    matches = [[0.1, 0.1], [0.6, 0.2], [0.5, 0.9]]
    modelled = [(), ("prune",), ("prune",)]
    assert leaders(matches, 1, modelled) == {1, 2}  # attack 0 matches the whole update best on both targets
    assert leaders(matches, 3, modelled) == {0, 1, 2}


def test_a_portfolio_saturates_its_leaders_only_and_keeps_a_failing_attack_apart(monkeypatch):
    from adversary.inversion import saturation

    # the yardstick: the first attack matches the update better than the second
    monkeypatch.setattr(saturation, "gradient_match", lambda views, recs, device: [rec.objective for rec in recs])
    leading, leading_asked = plateau_at(400)
    trailing, trailing_asked = plateau_at(400)

    def broken(options):
        raise RuntimeError("out of memory")

    slow = AttackOptions(name="dlg", iterations=10, restarts=1)
    entries = [(AttackOptions(name="dlg", iterations=100), leading), (slow, trailing), (slow, broken)]
    view = SimpleNamespace(input_bounds=None)  # all the step reads of a view here
    outcomes = run_portfolio(entries, [view], SaturationBudget(leaders=1), torch.device("cpu"))
    assert outcomes[0][0].saturation == SATURATED and len(leading_asked) > 1
    assert outcomes[1][0].saturation == NOT_LEADING and trailing_asked == [(10, 0, 1)]
    assert isinstance(outcomes[2], RuntimeError)


def test_a_portfolio_job_ranks_real_attacks_by_gradient_match_and_records_their_budget(digits):
    from digit_views import client_view, lenet

    from adversary.workers import PortfolioJob, _load, run_portfolio_job

    x, y = digits
    view = client_view(lenet(), x[:1], y[:1])
    attacks = [
        (AttackOptions(name="dlg", iterations=5, init_scale=0.05), 1),
        (AttackOptions(name="ig", iterations=2), 2),
    ]
    budget = SaturationBudget(leaders=1, max_iterations=10, max_restarts=2)
    dlg, ig = _load(run_portfolio_job(PortfolioJob(attacks, [view], budget).to_bytes()))
    # one yardstick for both attacks (their own objectives are in different units): the better matching one
    # leads and gets the budget (capped at 10 iterations x 2 restarts), the other keeps its first result
    leader, other = (dlg, ig) if ig[0].saturation == NOT_LEADING else (ig, dlg)
    assert other[0].saturation == NOT_LEADING and other[0].restarts == 0
    assert leader[0].saturation in (SATURATED, CAPPED) and leader[0].restarts in (0, 1, 2)
    assert leader[0].gradient_match is not None and other[0].gradient_match is not None
    assert leader[0].gradient_match <= other[0].gradient_match
