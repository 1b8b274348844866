"""How the auditor scores each canary from what its threat model sees (higher: more likely included).

* example level, white-box (the man in the middle sees every update the host client sends): a Dirac canary's
  score is its coordinate of the host's pseudo-gradient ``(w_global - w_sent) / lr``, summed over the rounds.
  After plain SGD steps that is the sum of the noisy step gradients' component along the canary, the
  white-box score of Steinke et al. (2023);
* example level, black-box (the final model only): a canary example's score is minus its loss under the final
  model, with the wrong label it was trained on;
* example level, white-box with canary examples (an audited Flower app, whose training takes examples, not
  gradients): a canary example's score is how much the update sent lowered its loss (before minus after), summed
  over the rounds;
* client level (Andrew et al. 2024): a canary client's score is the cosine between the model's change and
  its direction, summed over rounds (white-box: every round's aggregate) or of the final model against the
  initial one (black-box).

The scores never look at which canaries were included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from adversary.privacy_audit.canaries import CanaryClients, DiracCanaries


def flat_change(
    before: Mapping[str, torch.Tensor], after: Mapping[str, torch.Tensor], names: Sequence[str]
) -> torch.Tensor:
    """``before - after`` of the parameters ``names``, flattened in that order."""
    return torch.cat(
        [(before[name].detach().double() - after[name].detach().double()).reshape(-1).cpu() for name in names]
    )


class DiracScores:
    """White-box scores of Dirac canaries, accumulated over the host's updates."""

    def __init__(self, canaries: DiracCanaries, names: Sequence[str]) -> None:
        self.canaries = canaries
        self.names = list(names)  # the trainable parameters, in the order the coordinates index
        self.scores = np.zeros(len(canaries.coordinates))
        self.updates = 0

    def observe(self, global_state: Mapping[str, torch.Tensor], sent: Mapping[str, torch.Tensor], lr: float) -> None:
        self.scores += self.canaries.read(flat_change(global_state, sent, self.names) / lr)
        self.updates += 1


class ClientCanaryScores:
    """Client-level scores: cosines between the model's change and each canary client's direction."""

    def __init__(self, canaries: CanaryClients, names: Sequence[str]) -> None:
        self.canaries = canaries
        self.names = list(names)
        self.scores = np.zeros(len(canaries.included))
        self.updates = 0

    def observe(self, before: Mapping[str, torch.Tensor], after: Mapping[str, torch.Tensor]) -> None:
        self.scores += self.canaries.cosines(flat_change(after, before, self.names))
        self.updates += 1


@torch.no_grad()
def loss_scores(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 256) -> np.ndarray:
    """Minus each canary example's cross-entropy under ``model`` (in eval mode), with its (wrong) label."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    losses = [
        F.cross_entropy(model(x[i : i + batch].to(device)), y[i : i + batch].to(device), reduction="none").cpu()
        for i in range(0, len(x), batch)
    ]
    model.train(was_training)
    return -torch.cat(losses).double().numpy()


@torch.no_grad()
def update_loss_scores(
    model: nn.Module,
    before: Mapping[str, torch.Tensor],
    after: Mapping[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
) -> np.ndarray:
    """How much one update (the model ``before`` -> ``after``) learned each canary example: its loss, with the
    (wrong) label it would be trained on, before minus after. The white-box score of canary examples: it reads the
    update the adversary observes, never whether a canary was included."""
    model.load_state_dict(before)
    before_scores = loss_scores(model, x, y)  # minus the losses
    model.load_state_dict(after)
    return loss_scores(model, x, y) - before_scores
