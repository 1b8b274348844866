"""The runner joins a Ray cluster by its address, or says it is not there."""

from __future__ import annotations

import pytest
from tiny_configs import tiny_config

from fedsim.config import ConfigError
from fedsim.engine.lifecycle.network import free_port


def test_a_ray_cluster_address_joins_the_cluster_without_capping_it(monkeypatch):
    from fedsim.engine.lifecycle.simulation import backend_config

    config = tiny_config(adversary={"attacks": [{"name": "dlg"}]})
    own = backend_config(config.federation, config.adversary, {"num_cpus": 2})
    assert own["init_args"]["num_cpus"] >= 1 and own["init_args"]["address"] == "local"  # never a `ray start` cluster
    joined = backend_config(config.federation, config.adversary, {"num_cpus": 2}, ray_address="10.0.0.1:6379")
    assert joined["init_args"]["address"] == "10.0.0.1:6379"
    assert "num_cpus" not in joined["init_args"] and "num_gpus" not in joined["init_args"]  # Ray refuses them there


def test_a_ray_cluster_that_is_not_there_is_one_line_naming_the_setting(monkeypatch):
    from fedsim.engine.lifecycle.simulation import cluster_address

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cluster_address(None) is None
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(ConfigError, match=rf"federation.ray_address = '{address}': nothing answers there"):
        cluster_address(address)
    monkeypatch.setenv("RAY_ADDRESS", address)
    with pytest.raises(ConfigError, match=rf"RAY_ADDRESS = '{address}': nothing answers there"):
        cluster_address(None)
