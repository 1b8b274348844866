"""From an AttackerView to what gets matched, and the dummy-side simulation that produces its counterpart.

Three cases, all expressed in "gradient units" (the update divided by the learning rate), so that one
L2 weight means the same thing in each:

* one local step, learning rate known: the observed gradient is ``(w_t - w_{t+1}) / lr`` and the dummy
  side is the gradient of the mean cross-entropy of the dummy batch (DLG, Zhu et al. 2019, eq. 2). For an
  aggregate of one-step client updates with equal sample counts, FedAvg's average is exactly the mean
  gradient of the union of the clients' samples, so the same case applies with ``num_samples`` = union.
* several local steps (FedAvg, Inverting Gradients section 5, Geiping et al. 2020): the dummy side
  unrolls the client's plain SGD (``clients.training.train_locally``: CrossEntropy with mean reduction,
  ``batch_schedule``) on the dummy batch and returns ``(w_0 - w_K) / lr``, matched against the observed
  delta over lr. The client shuffles every epoch; that permutation is unknown, so the dummy batch is
  walked in a fixed order (dummy sample identities are arbitrary, so within the first epoch this loses
  nothing; later epochs are an approximation, as in Geiping et al.'s ``loss_steps``).
* unknown local training (``view.local_training is None``): one step with an unknown learning rate is
  assumed; the delta itself is the target and the distance is made scale-free
  (``objective.gradient_distance(scale_free=True)``).

Momentum, weight decay and Adam on the client are not simulated (``LocalTraining`` does not carry them).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from adversary.view import AttackerView

Params = dict[str, torch.Tensor]


@dataclass(frozen=True)
class MatchSpec:
    """How every target of one batched group is matched (the group shares it by construction)."""

    lr: float | None  # the client's learning rate; None = unknown (scale-free matching)
    batches: tuple[tuple[int, int], ...]  # [start, stop) of the dummy batch used by each local step

    @property
    def scale_free(self) -> bool:
        return self.lr is None

    @property
    def unrolled(self) -> bool:
        """More than one step: the update is not a single gradient and must be simulated."""
        return len(self.batches) > 1


def match_spec(view: AttackerView) -> MatchSpec:
    n = view.num_samples
    training = view.local_training
    if training is None or training.local_steps == 1:
        # One step: every one of the num_samples samples is behind the gradient.
        return MatchSpec(lr=None if training is None else training.lr, batches=((0, n),))
    return MatchSpec(lr=training.lr, batches=fixed_order_batches(n, training.batch_size, training.local_steps))


def fixed_order_batches(num_samples: int, batch_size: int, steps: int) -> tuple[tuple[int, int], ...]:
    """``clients.training.batch_schedule`` with the identity in place of each epoch's permutation."""
    batch_size = min(batch_size, num_samples)
    per_epoch = math.ceil(num_samples / batch_size)
    epoch = [(start, min(start + batch_size, num_samples)) for start in range(0, num_samples, batch_size)]
    return tuple(epoch[step % per_epoch] for step in range(steps))


def observed_target(view: AttackerView, names: list[str], device: torch.device, dtype: torch.dtype) -> list[torch.Tensor]:
    """The observed update in gradient units, ``(w_t - w_{t+1}) / lr`` (the bare delta when lr is unknown)."""
    delta = view.parameter_delta()
    scale = 1.0 if view.local_training is None else 1.0 / view.local_training.lr
    return [delta[name].detach().to(device=device, dtype=dtype) * scale for name in names]


def observed_mean_gradient(view: AttackerView, names: list[str]) -> tuple[dict[str, torch.Tensor], bool]:
    """The mean per-step gradient ``delta / (lr * local_steps)`` and whether its scale is known.

    Over whole epochs each sample enters the per-step means equally often, so this approximates the
    full-batch mean gradient (exact for one step); label recovery reads it.
    """
    delta = view.parameter_delta()
    if view.local_training is None:
        return {name: delta[name].detach() for name in names}, False
    factor = 1.0 / (view.local_training.lr * view.local_training.local_steps)
    return {name: delta[name].detach() * factor for name in names}, True


def simulated_update(
    spec: MatchSpec,
    forward: Callable[[Params, torch.Tensor], tuple[torch.Tensor, tuple]],
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    params: Params,
    x: torch.Tensor,
    probs: torch.Tensor,
    names: list[str],
) -> tuple[list[torch.Tensor], tuple]:
    """The dummy batch's update in gradient units, and the BN statistics of its first forward.

    ``forward(params, x) -> (logits, bn_stats)``; ``loss(logits, probs)`` is the client's loss with the
    (soft or one-hot) dummy labels ``probs``. Written with ``torch.func.grad`` so that it is
    differentiable w.r.t. ``x`` and ``probs`` and vmappable over problems.
    """

    def step_loss(p: Params, xb: torch.Tensor, qb: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        logits, stats = forward(p, xb)
        return loss(logits, qb), stats

    step_grad = torch.func.grad(step_loss, has_aux=True)
    if not spec.unrolled:
        grads, stats = step_grad(params, x, probs)
        return [grads[name] for name in names], stats
    lr = spec.lr
    assert lr is not None  # unrolled views always carry their local training
    current = dict(params)
    first_stats: tuple = ()
    for index, (start, stop) in enumerate(spec.batches):
        grads, stats = step_grad(current, x[start:stop], probs[start:stop])
        if index == 0:
            first_stats = stats
        current = {name: current[name] - lr * grads[name] for name in names}
    return [(params[name] - current[name]) / lr for name in names], first_stats
