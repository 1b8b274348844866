"""The attacker's model: the victim's batch statistics solved from one step of running statistics."""

from __future__ import annotations

import torch
from digit_views import CPU, client_view, tiny_bn_net

from adversary.inversion.model import AttackerModel, victim_batch_statistics


def test_victim_batchnorm_statistics_are_solved_exactly_from_one_step_of_running_stats(digits):
    x, y = digits
    model = tiny_bn_net()
    view = client_view(model, x[:3], y[:3], lr=0.1, bn_statistics=True)
    recorder = AttackerModel.from_view(view, CPU, torch.float64, record_bn=True)

    _, true_stats = recorder.forward(recorder.parameters_from(view.global_state, CPU, torch.float64), x[:3].double())
    solved = victim_batch_statistics(view, CPU, torch.float64)

    for (mean, var), (mean_v, var_v) in zip(true_stats, solved, strict=True):
        torch.testing.assert_close(mean_v, mean, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(var_v, var, rtol=1e-4, atol=1e-5)
