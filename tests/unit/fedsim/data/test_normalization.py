"""Normalization: global, per-client or none, and exact round trips."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsim.data import ChannelStats, channel_stats, federation_stats


def two_clients(rng: np.random.Generator) -> tuple[np.ndarray, list[np.ndarray]]:
    x_train = rng.random((40, 3, 5, 5), dtype=np.float32) * np.array([1.0, 0.5, 0.1], np.float32)[:, None, None]
    x_train[:10] *= 0.5  # client 0's data is darker than the rest
    return x_train, [np.arange(10), np.arange(10, 40)]


@pytest.mark.parametrize("mode", ["global", "client", "none"])
def test_denormalize_exactly_undoes_normalize(mode: str) -> None:
    x_train, partitions = two_clients(np.random.default_rng(0))
    client_stats, _ = federation_stats(x_train, partitions, mode)
    x = torch.from_numpy(x_train[partitions[0]])
    stats = client_stats[0]
    assert torch.allclose(stats.denormalize(stats.normalize(x)), x, atol=1e-6)
    assert torch.allclose(stats.denormalize(stats.normalize(x[0])), x[0], atol=1e-6)  # one (C, H, W) image


def test_global_mode_shares_the_training_set_statistics() -> None:
    x_train, partitions = two_clients(np.random.default_rng(0))
    client_stats, server_stats = federation_stats(x_train, partitions, "global")
    assert client_stats[0] == client_stats[1] == server_stats
    assert np.allclose(server_stats.std, x_train.std(axis=(0, 2, 3)), atol=1e-6)
    normalized = server_stats.normalize(torch.from_numpy(x_train))
    assert torch.allclose(normalized.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-5)


def test_client_mode_measures_each_clients_own_data() -> None:
    x_train, partitions = two_clients(np.random.default_rng(0))
    client_stats, server_stats = federation_stats(x_train, partitions, "client")
    assert np.allclose(client_stats[0].mean, x_train[:10].mean(axis=(0, 2, 3)), atol=1e-6)
    assert client_stats[0] != client_stats[1]
    assert server_stats == channel_stats(x_train)  # the server holds no client data


def test_none_mode_is_the_identity() -> None:
    x_train, partitions = two_clients(np.random.default_rng(0))
    client_stats, server_stats = federation_stats(x_train, partitions, "none")
    assert server_stats == client_stats[1] == ChannelStats(mean=(0.0,) * 3, std=(1.0,) * 3)


def test_constant_channel_keeps_std_one_and_stats_round_trip_through_json_dicts() -> None:
    x = np.zeros((3, 2, 4, 4), dtype=np.float32)
    x[:, 1] = np.linspace(0, 1, 16, dtype=np.float32).reshape(4, 4)
    stats = channel_stats(x)
    assert stats.std[0] == 1.0 and stats.std[1] > 0
    assert ChannelStats.from_dict(stats.to_dict()) == stats


def test_token_ids_pass_through_their_statistics_unchanged():
    from fedsim.data import TOKEN_IDS

    ids = torch.tensor([[5, 3, 0]])
    assert TOKEN_IDS.normalize(ids) is ids and TOKEN_IDS.denormalize(ids) is ids
    assert ChannelStats.from_dict(TOKEN_IDS.to_dict()) == TOKEN_IDS
