"""The saturation step: leaders by an attacker-side yardstick, more budget until the attack's own objective stops
improving or the cap is reached, and every result says which."""

from __future__ import annotations

import torch

from adversary.inversion.saturation import (
    CAPPED,
    NOT_LEADING,
    SATURATED,
    SaturationBudget,
    leaders,
    run_portfolio,
    saturate,
)
from adversary.view import Reconstruction
from fedsim.config import AttackOptions


def result(objective: float, iterations: int, cut: bool = False) -> Reconstruction:
    return Reconstruction(
        images=torch.zeros(1, 1, 2, 2),
        labels=torch.zeros(1, dtype=torch.int64),
        objective=objective,
        restart_objectives=(objective,),
        iterations=iterations,
        seconds=0.0,
        cut=cut,
    )


def plateau_at(iterations: int):
    """A toy attack whose objective halves with every doubling of the iterations up to ``iterations``, then stays."""
    asked = []

    def run(options) -> list[Reconstruction]:
        asked.append((options.iterations, options.restarts))
        return [result(1.0 / min(options.iterations, iterations), options.iterations)]

    return run, asked


def test_saturation_doubles_the_iterations_then_the_restarts_until_neither_improves_the_objective():
    run, asked = plateau_at(800)
    options = AttackOptions(name="dlg", iterations=100, restarts=1)
    (rec,) = saturate(run, options, run(options), SaturationBudget(tolerance=0.01), seconds=None)
    # 200, 400, 800 iterations improve; 1600 does not, and twice the restarts at 800 neither: it stops there,
    # on the attack's own objective
    assert asked[1:] == [(200, 1), (400, 1), (800, 1), (1600, 1), (800, 2)]
    assert rec.saturation == SATURATED
    assert rec.objective == 1.0 / 800
    assert rec.restarts == 1 and rec.iterations == 800  # the budget of the pass that gave the result


def test_restarts_that_help_let_the_iterations_grow_again():
    asked = []

    def run(options) -> list[Reconstruction]:  # better with more restarts up to 4, and with more iterations up to 400
        asked.append((options.iterations, options.restarts))
        return [result(1.0 / (min(options.iterations, 400) * min(options.restarts, 4)), options.iterations)]

    options = AttackOptions(name="dlg", iterations=400, restarts=1)
    (rec,) = saturate(run, options, run(options), SaturationBudget(tolerance=0.01), seconds=None)
    assert asked[1:] == [(800, 1), (400, 2), (400, 4), (400, 8), (800, 4)]
    assert rec.saturation == SATURATED and rec.objective == 1.0 / 1600


def test_saturation_that_reaches_the_cap_first_says_capped():
    run, asked = plateau_at(10_000)
    options = AttackOptions(name="ig", iterations=100, restarts=1)
    budget = SaturationBudget(max_iterations=400, max_restarts=2)
    (rec,) = saturate(run, options, run(options), budget, seconds=None)
    # the iterations reach their cap still improving; one more restart does not help: more iterations might
    assert asked[1:] == [(200, 1), (400, 1), (400, 2)]
    assert rec.saturation == CAPPED and rec.objective == 1.0 / 400


def test_leaders_are_the_best_per_target_by_gradient_match():
    matches = [[0.5, 0.1], [0.2, 0.9], [None, None], [0.3, 0.05]]
    assert leaders(matches, 1) == {1, 3}
    assert leaders(matches, 2) == {0, 1, 3}


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
    outcomes = run_portfolio(entries, [object()], SaturationBudget(leaders=1), torch.device("cpu"))
    assert outcomes[0][0].saturation == SATURATED and len(leading_asked) > 1
    assert outcomes[1][0].saturation == NOT_LEADING and trailing_asked == [(10, 1)]
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
    assert leader[0].saturation in (SATURATED, CAPPED) and leader[0].restarts in (0, 2)
    assert leader[0].gradient_match is not None and other[0].gradient_match is not None
    assert leader[0].gradient_match <= other[0].gradient_match
