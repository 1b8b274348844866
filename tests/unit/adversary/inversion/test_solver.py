"""The solver: batched restarts equal a loop of single ones; the trajectory keeps the best restart."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from digit_views import CPU, SIDE, client_view, lenet

from adversary.attacks import dlg, inverting_gradients
from adversary.inversion import run_attack
from adversary.inversion.solver import invert
from fedsim.config import AttackOptions


@pytest.mark.parametrize(
    ("spec", "options"),
    [
        (inverting_gradients.SPEC, AttackOptions(name="ig", iterations=30, restarts=3, precision="float64")),
        (dlg.SPEC, AttackOptions(name="dlg", iterations=15, restarts=3, precision="float64")),
    ],
    ids=["signed-adam", "batched-lbfgs"],
)
def test_batched_restarts_equal_a_loop_of_single_restarts(digits, spec, options):
    x, y = digits
    view = client_view(lenet(), x[:1], y[:1])

    [batched] = invert(spec, [view], options, seed=3, device=CPU)
    looped = [invert(spec, [view], options, seed=3, device=CPU, restart_ids=[r])[0] for r in range(3)]

    np.testing.assert_allclose(batched.restart_objectives, [rec.objective for rec in looped], rtol=1e-6)
    best = int(np.argmin(batched.restart_objectives))
    torch.testing.assert_close(batched.images, looped[best].images, rtol=1e-5, atol=1e-6)


def test_trajectory_keeps_the_best_restart_every_n_iterations(digits):
    x, y = digits
    view = client_view(lenet(), x[:1], y[:1])
    [rec] = run_attack(AttackOptions(name="dlg", iterations=20, restarts=2, log_every=5), [view], seed=0, device=CPU)

    assert [point.iteration for point in rec.trajectory] == [5, 10, 15, 20]
    assert rec.trajectory[-1].objective == pytest.approx(rec.objective)
    assert all(point.images.device == CPU and point.images.shape == (1, 1, SIDE, SIDE) for point in rec.trajectory)
    objectives = [point.objective for point in rec.trajectory]
    assert objectives == sorted(objectives, reverse=True)  # L-BFGS with a line search never goes up
