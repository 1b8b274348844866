"""A client trained under DP-SGD for a few rounds with Dirac canaries, audited from its updates (in process)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from adversary.privacy_audit.bound import AuditResult, audit_guesses
from adversary.privacy_audit.canaries import DiracCanaries
from adversary.privacy_audit.scores import DiracScores
from clients.defenses.base import TrainingContext
from clients.training import train_locally
from tests.helpers.dp_training import client, dpsgd

N, BATCH, STEPS, ROUNDS, LR = 100, 20, 10, 5, 0.1


def wide_model() -> nn.Module:
    """~17k weights: a random coordinate's own gradient is small beside one canary's (as in real models)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 2))


def audited_dpsgd(seed: int, state_dir, target_epsilon: float = 4.0, canaries: int = 2000) -> tuple[AuditResult, float]:
    """(the white-box audit of ``ROUNDS`` rounds of DP-SGD at ``target_epsilon``, the accountant's epsilon)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(N, 1, 8, 8, generator=generator)
    y = (x.mean(dim=(1, 2, 3)) > 0).long()
    model = wide_model()
    names = [name for name, _ in model.named_parameters()]
    plan = DiracCanaries.draw(canaries, sum(p.numel() for p in model.parameters()), 1.0, seed=seed)
    scores = DiracScores(plan, names)
    cfg = client(dpsgd(target_epsilon=target_epsilon), lr=LR, batch_size=BATCH, local_steps=STEPS)
    for server_round in range(1, ROUNDS + 1):
        before = {name: value.detach().clone() for name, value in model.named_parameters()}
        result = train_locally(
            model,
            x,
            y,
            np.arange(N),
            cfg,
            seed=server_round,
            context=TrainingContext(server_round, ROUNDS, state_dir),
            canaries=plan.inserter(BATCH / N, seed=1000 * seed + server_round),
        )
        scores.observe(before, dict(model.named_parameters()), LR)
    return audit_guesses(scores.scores, plan.included, delta=1e-5), result.defense_records["defense.dpsgd.epsilon"]
