"""The optimizers return each problem's best iterate, not its last."""

from __future__ import annotations

import torch

from adversary.inversion.optimizers import FirstOrderSettings, first_order


def quadratic(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """f(v) = |v|^2 per row, and its gradient."""
    return (v * v).sum(dim=1), 2 * v


def test_signed_steps_return_the_lowest_objective_iterate_not_the_last():
    # Signed SGD with a fixed step of 0.3 from 0.1 jumps between -0.2 and 0.1: the last iterate (-0.2 after
    # an odd number of steps) is worse than the start; the best one is 0.1 (f = 0.01).
    v0 = torch.tensor([[0.1], [0.1]])
    settings = FirstOrderSettings(method="sgd", lr=0.3, signed=True)
    v, f = first_order(quadratic, v0, 5, settings)
    last = v0.clone()
    for _ in range(5):
        last = last - 0.3 * torch.sign(2 * last)
    last_f, _ = quadratic(last)
    assert torch.all(f <= last_f)
    assert torch.allclose(f, quadratic(v)[0])  # the objective returned is that of the iterate returned
    assert torch.allclose(v, v0)


def test_lbfgs_stops_a_problem_whose_steepest_descent_line_search_fails_instead_of_retrying_it():
    from adversary.inversion.optimizers import LbfgsSettings, lbfgs

    # row 0: a quadratic, which L-BFGS solves; row 1: a plateau whose stated gradient points nowhere downhill,
    # so every line search from it fails, the same way each time
    calls = []

    def evaluate(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(1)
        f, g = quadratic(v)
        return torch.stack([f[0], torch.ones(())]), torch.stack([g[0], torch.ones(v.shape[1])])

    v0 = torch.tensor([[0.5, -0.25], [0.3, 0.7]], dtype=torch.float64)
    settings = LbfgsSettings(lr=1.0)
    v, f = lbfgs(evaluate, v0, 1000, settings)
    assert torch.equal(v[1], v0[1]) and f[1] == 1.0  # the stuck problem never moved
    assert f[0] < 1e-20  # its batch mate was solved
    # once both are finished the remaining iterations are skipped, not spent on line searches that must fail
    assert len(calls) < 100 * settings.max_trials
