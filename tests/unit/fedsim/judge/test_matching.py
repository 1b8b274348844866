"""Hungarian pairing of reconstructions with the true images."""

import torch
from image_pairs import _pair

from fedsim.judge.matching import pair_by_mse


def test_hungarian_pairing_recovers_a_permutation():
    truth, _ = _pair(6, 3, 8, seed=1)
    permutation = torch.tensor([4, 0, 5, 2, 1, 3])
    noisy = (truth[permutation] + 0.02 * torch.randn(truth.shape, generator=torch.Generator().manual_seed(2))).clamp(
        0, 1
    )
    rec_idx, truth_idx = pair_by_mse(noisy, truth)
    assert truth_idx.tolist() == list(range(6))
    assert permutation[rec_idx].tolist() == truth_idx.tolist()


def test_hungarian_pairing_with_unequal_counts():
    truth, _ = _pair(5, 1, 8, seed=3)
    rec_idx, truth_idx = pair_by_mse(truth[[3, 1]], truth)  # fewer reconstructions than truth
    assert rec_idx.tolist() == [1, 0] and truth_idx.tolist() == [1, 3]
    extra = torch.cat([truth[[2]], torch.zeros(1, 1, 8, 8), truth[[0]]])
    rec_idx, truth_idx = pair_by_mse(extra, truth[[0, 2]])  # more reconstructions than truth
    assert rec_idx.tolist() == [2, 0] and truth_idx.tolist() == [0, 1]
