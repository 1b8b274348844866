"""The terms of a gradient-inversion objective, for ONE problem (callers vmap them over problems).

* gradient-matching distances between the dummy's update and the observed one:
  ``l2`` (DLG, Zhu et al. 2019, eq. 4: sum over layers of squared differences),
  ``cosine`` (Inverting Gradients, Geiping et al. 2020, eq. 4: one minus the cosine similarity of the
  concatenation of all layers), ``l1``, ``layer-cosine`` (the mean over layers of one minus each layer's
  cosine similarity: blind to a positive factor per layer, as per-tensor clipping applies);
* the soft-label cross-entropy of the simulated client.

The regularizers added to the distance (total variation, BatchNorm statistics, ...) are terms of their own,
one module each, in ``adversary.inversion.regularizers``.

Every function here is a pure function of tensors without data-dependent control flow, so that
``torch.func.vmap`` and ``torch.func.grad`` compose with it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

DISTANCES = ("l2", "cosine", "l1", "layer-cosine")

# Added under square roots: the derivative of sqrt at 0 is infinite, and a dummy whose update is
# exactly zero (or identical to the target) must not produce NaN gradients.
_SQRT_EPS = 1e-20


def _flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def gradient_distance(
    dummy: Sequence[torch.Tensor], target: Sequence[torch.Tensor], loss: str, scale_free: bool = False
) -> torch.Tensor:
    """Distance between the dummy's and the observed update (lists of per-parameter tensors).

    ``scale_free``: the observed update is known only up to a positive factor (unknown learning rate),
    so both sides are scaled to unit global L2 norm before ``l2`` / ``l1``; ``cosine`` is scale-free
    already (for unit vectors, ``l2`` = 2 * ``cosine``).
    """
    if loss == "layer-cosine":
        terms = [1.0 - (a * b).sum() / (_norm(a) * _norm(b)) for a, b in zip(dummy, target, strict=True)]
        return torch.stack(terms).mean()
    a, b = _flat(dummy), _flat(target)
    if loss == "cosine":
        return 1.0 - (a * b).sum() / (_norm(a) * _norm(b))
    if scale_free:
        a, b = a / _norm(a), b / _norm(b)
    if loss == "l2":
        return ((a - b) ** 2).sum()
    if loss == "l1":
        return (a - b).abs().sum()
    raise ValueError(f"unknown gradient distance '{loss}'; allowed: {', '.join(DISTANCES)}")


def _norm(v: torch.Tensor) -> torch.Tensor:
    return torch.sqrt((v * v).sum() + _SQRT_EPS)


def soft_cross_entropy(logits: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """Batch mean of -sum_k q_k log softmax(z)_k: nn.CrossEntropyLoss for one-hot q, DLG's soft-label loss otherwise."""
    return -(target_probs * torch.log_softmax(logits, dim=-1)).sum(dim=-1).mean()
