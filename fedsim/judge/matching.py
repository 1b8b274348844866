"""Pair reconstructed images with the true ones before scoring them.

A batch gradient is invariant to the order of the batch, so an attack returns its images in an
arbitrary order. Scoring each reconstruction against the truth at the same index would punish that
order; instead a one-to-one assignment minimising total MSE is found (Hungarian algorithm), as breaching
does. The assignment is computed in [0, 1] image space, so the caller maps reconstructions there first.
"""

from __future__ import annotations

import torch
from scipy.optimize import linear_sum_assignment

_BLOCK_ELEMENTS = 1 << 24  # float64 values per block of the cost matrix's broadcast: 128 MiB


def mse_cost_matrix(reconstructed: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """(N_rec, N_true) float64 matrix of per-pair MSE.

    Built in blocks of rows, each one (rows, N_true, D) broadcast of at most ``_BLOCK_ELEMENTS`` values,
    rather than in one broadcast, whose memory grows with the product of the batch sizes, or row by row,
    which spends its time on the overhead of thousands of small operations (the floor pairs hundreds of random
    guesses with every target); and in float64 rather than via ``cdist``, whose expanded-square formula
    loses precision exactly for the near-identical pairs that matter most.
    """
    if reconstructed.ndim != 4 or truth.ndim != 4 or reconstructed.shape[1:] != truth.shape[1:]:
        raise ValueError(
            f"pairing needs (N, C, H, W) tensors of one image shape, got {tuple(reconstructed.shape)} "
            f"and {tuple(truth.shape)}"
        )
    rec = reconstructed.detach().cpu().double().flatten(1)
    true = truth.detach().cpu().double().flatten(1)
    if len(rec) == 0:
        return torch.zeros(0, len(true), dtype=torch.float64)
    rows = max(1, _BLOCK_ELEMENTS // max(1, true.numel()))
    return torch.cat(
        [(true - rec[start : start + rows, None]).pow(2).mean(dim=2) for start in range(0, len(rec), rows)]
    )


def pair_by_mse(reconstructed: torch.Tensor, truth: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Minimum-total-MSE one-to-one pairing: ``(rec_idx, truth_idx)``, two int64 tensors of equal length.

    Pair ``i`` is ``reconstructed[rec_idx[i]]`` with ``truth[truth_idx[i]]``. With unequal counts,
    ``min(N_rec, N_true)`` pairs are made and the surplus images stay unpaired. Pairs are ordered by
    truth index, so a grid of paired images shows the originals in their own order.
    """
    return pair_by_cost(mse_cost_matrix(reconstructed, truth))


def pair_by_cost(cost: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``pair_by_mse`` on an (N_rec, N_true) cost matrix already computed (rows of a larger one, say)."""
    if cost.numel() == 0:
        empty = torch.zeros(0, dtype=torch.long)
        return empty, empty.clone()
    rows, cols = linear_sum_assignment(cost.numpy())
    order = cols.argsort(kind="stable")
    return torch.as_tensor(rows[order], dtype=torch.long), torch.as_tensor(cols[order], dtype=torch.long)
