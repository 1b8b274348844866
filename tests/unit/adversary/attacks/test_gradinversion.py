"""GradInversion: the victim's BatchNorm statistics beat Inverting Gradients, and need their grant."""

from __future__ import annotations

import pytest
import torch
from digit_views import CPU, client_view, psnr, tiny_bn_net

from adversary.inversion import run_attack
from fedsim.config import AttackOptions


def test_gradinversion_beats_inverting_gradients_with_the_victims_batchnorm_statistics(digits):
    x, y = digits
    truth, labels = x[:2], y[:2]
    view = client_view(tiny_bn_net(), truth, labels, lr=0.1, bn_statistics=True)
    budget = dict(iterations=250)  # both attacks have settled by then: 35 dB against 21 dB for ig

    [with_bn] = run_attack(AttackOptions(name="gradinversion", **budget), [view], seed=0, device=CPU)
    [without] = run_attack(AttackOptions(name="ig", **budget), [view], seed=0, device=CPU)
    random_image = psnr(torch.rand_like(truth), truth)

    assert psnr(with_bn.images, truth) > random_image + 15  # about 7 dB for a random image
    assert psnr(with_bn.images, truth) > psnr(without.images, truth) + 3


def test_gradinversion_refuses_without_the_bn_statistics_grant(digits):
    x, y = digits
    view = client_view(tiny_bn_net(), x[:2], y[:2], lr=0.1)  # bn_statistics defaults to False
    with pytest.raises(ValueError, match=r"adversary.knows.bn_statistics: true"):
        run_attack(AttackOptions(name="gradinversion", iterations=1), [view], seed=0, device=CPU)
