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
