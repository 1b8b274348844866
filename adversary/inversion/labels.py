"""Label recovery from the classifier layer's update (before image reconstruction; iDLG, IG, GradInversion).

With the client's loss ``CE`` (mean over N samples) and softmax outputs p_n, the last linear layer
``z = W h + b`` receives

    dL/db = (1/N) sum_n (p_n - e_{y_n})                  dL/dW = (1/N) sum_n (p_n - e_{y_n}) h_n^T

so a class absent from the batch has a strictly positive bias gradient, and the bias gradient of class
c is (S_c - k_c) / N, where k_c counts the label and S_c = sum_n p_nc is the batch's predicted mass.

Method (with a bias):

1. every class with a negative bias gradient holds at least one label (S_c >= 0 > S_c - k_c needs k_c >= 1);
2. the expected count of each class is k_c = S_c - N * g_c. S_c is unknown, but the attacker knows the
   classifier: the rows of the positive-gradient classes give a p-weighted average penultimate feature
   r = sum_{g_c>0} dW_c / sum_{g_c>0} g_c (exactly a convex combination of the h_n when those classes are
   absent), and S_c ~ N * softmax(W r + b)_c;
3. the remaining N - |step 1| labels go, one at a time, to the class whose estimated count exceeds its
   assigned count the most.

For distinct labels, step 1 alone is exact whenever no present class collects a predicted mass S_c >= 1
over the batch; step 2 repairs the usual failure of sign rules on untrained networks, where one class
dominates every prediction (S_c > 1 although the class is present), and counts repeated labels. With one
sample and sigmoid/ReLU features this is iDLG's rule (Zhao et al. 2020). The scale of the gradient
matters in step 2: when the learning rate is unknown it is fitted on the positive classes.

Without a bias, the row sums of dW (= (1/N) sum_n (p_nc - y_nc) |h_n|_1 for non-negative features)
stand in for the bias gradient in step 1 (iDLG's weight-sign rule generalised), and step 3 fills by
LLG's impact heuristic (Wainakh et al. 2022): the most negative row sum after adding one mean impact
per label already assigned.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from adversary.inversion.model import classifier_layer
from adversary.inversion.targets import observed_mean_gradient
from adversary.view import AttackerView

# Alternations of scale and counts when the learning rate is unknown; they settle in two or three.
_SCALE_ROUNDS = 10


def recover_labels(view: AttackerView, kept: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """int64 labels (CPU, length ``view.num_samples``, sorted by class): granted ones, else recovered.

    ``kept(observed) -> 0/1 mask``: which entries of the observed update are the client's own (an adaptive
    attack's ``entry_mask``); the classifier entries a defense replaced are estimated from the kept ones
    first (``_fill_replaced``), since a dropped bias entry would otherwise hide the label."""
    n = view.num_samples
    if view.labels is not None:
        labels = view.labels.detach().to(device="cpu", dtype=torch.int64).reshape(-1)
        if len(labels) != n:
            raise ValueError(f"view.labels has {len(labels)} labels but num_samples = {n}")
        return labels
    layer, has_bias = classifier_layer(view.model, view.num_classes)
    names = [f"{layer}.weight"] + ([f"{layer}.bias"] if has_bias else [])
    grads, scale_known = observed_mean_gradient(view, names)
    dw = grads[f"{layer}.weight"].double().cpu()
    if has_bias:
        weight = view.global_state[f"{layer}.weight"].double().cpu()
        bias = view.global_state[f"{layer}.bias"].double().cpu()
        db = grads[f"{layer}.bias"].double().cpu()
        if kept is not None:
            dw, db = _fill_replaced(dw, db, kept(dw).bool(), kept(db).bool())
        counts = _counts_with_bias(dw, db, weight, bias, n, scale_known)
    else:
        counts = _counts_without_bias(dw.sum(dim=1), n)
    return torch.repeat_interleave(torch.arange(view.num_classes), counts)


def _fill_replaced(
    dw: torch.Tensor, db: torch.Tensor, kept_w: torch.Tensor, kept_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The classifier gradient with the entries a defense replaced estimated from the kept ones.

    Row c of dW is sum_n (p_nc - y_nc) h_n^T: for one sample exactly (p_c - y_c) h, a multiple of the bias
    entry. The feature h is read off the kept rows of classes with a kept positive bias entry (entry-wise,
    over the rows where that entry was kept), and a replaced bias entry is the least-squares multiple of h
    that its row's kept entries show; replaced weight entries become bias * h. For several samples this is
    the same estimate with the batch's (p-weighted) mean feature.
    """
    reference = kept_b & (db > 0)
    if not reference.any():
        return dw, db
    ratios = torch.where(kept_w[reference], dw[reference] / db[reference, None], torch.zeros_like(dw[reference]))
    seen = kept_w[reference].sum(dim=0)
    feature = ratios.sum(dim=0) / seen.clamp(min=1)
    usable = seen > 0
    dw, db = dw.clone(), db.clone()
    for c in torch.nonzero(~kept_b).flatten().tolist():
        columns = kept_w[c] & usable
        if columns.any():
            db[c] = (dw[c, columns] * feature[columns]).sum() / (feature[columns] ** 2).sum()
    dw = torch.where(kept_w, dw, db[:, None] * feature[None, :])
    return dw, db


def _sure_present(score: torch.Tensor, n: int) -> torch.Tensor:
    """0/1 counts for the classes with a negative score (the n most negative if there are more)."""
    counts = torch.zeros(len(score), dtype=torch.int64)
    negative = torch.nonzero(score < 0).flatten()
    if len(negative) > n:
        negative = negative[torch.argsort(score[negative])[:n]]
    counts[negative] = 1
    return counts


def _counts_with_bias(
    dw: torch.Tensor, db: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, n: int, scale_known: bool
) -> torch.Tensor:
    counts = _sure_present(db, n)
    if counts.sum() == n:
        return counts
    positive = db > 0
    if positive.any():
        feature = dw[positive].sum(dim=0) / db[positive].sum()
        predicted = torch.softmax(weight @ feature + bias, dim=0)  # ~ S_c / n
    else:  # cannot happen for a real update (the bias gradients sum to zero); uniform predictions then
        predicted = torch.full_like(db, 1.0 / len(db))
    if scale_known:
        return _fill(counts, n * (predicted - db), n)
    # delta = lr * gradient with lr unknown: alternate between the scale s that best explains
    # s * db = predicted - counts / n (least squares) and the counts that scale implies.
    current = counts
    for _ in range(_SCALE_ROUNDS):
        target = predicted - current.double() / n
        scale = (target * db).sum() / (db**2).sum()
        updated = _fill(counts, n * (predicted - scale * db), n)
        if torch.equal(updated, current):
            break
        current = updated
    return current


def _counts_without_bias(row_sums: torch.Tensor, n: int) -> torch.Tensor:
    counts = _sure_present(row_sums, n)
    impact = -row_sums.clamp(max=0).sum() / n  # mean contribution of one label to its row sum
    # Residual after the labels already assigned: a class with more labels than found so far stays negative.
    while counts.sum() < n:
        residual = row_sums + counts.double() * impact
        counts[int(torch.argmin(residual))] += 1
    return counts


def _fill(counts: torch.Tensor, expected: torch.Tensor, n: int) -> torch.Tensor:
    """Assign the labels still missing, one at a time, to the class most under-counted."""
    counts = counts.clone()
    while counts.sum() < n:
        counts[int(torch.argmax(expected - counts.double()))] += 1
    return counts
