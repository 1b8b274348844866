"""The Flower app: its bundle, and ClientApps that find their partition and data or say which node cannot."""

from __future__ import annotations

import pytest
from flwr.app import Context, RecordDict
from repository import REPO_ROOT
from tiny_configs import tiny_config

from fedsim.config import ConfigError
from fedsim.engine.deployment.run_config import RunRequest, to_run_config


def _context(node_config: dict, run_config: dict, node_id: int = 7) -> Context:
    return Context(run_id=1, node_id=node_id, node_config=node_config, state=RecordDict(), run_config=run_config)


def test_the_flower_app_bundle_holds_the_packages_and_no_tests():
    import io
    import zipfile

    from flwr.cli.build import build_fab_from_disk

    names = zipfile.ZipFile(io.BytesIO(build_fab_from_disk(REPO_ROOT))).namelist()
    assert (
        "fedsim/engine/deployment/app.py" in names and "clients/client_app.py" in names and "adversary/taps.py" in names
    )
    assert not [name for name in names if name.startswith(("tests/", "bench/", "runs/"))]


def test_a_supernode_without_its_partition_or_with_another_federation_size_is_refused_naming_the_node(tmp_path):
    from fedsim.engine.deployment.app import client_spec

    run_config = to_run_config(RunRequest(config=tiny_config(), run_dir=tmp_path))
    with pytest.raises(
        ConfigError, match=r"node 7: its node config has no 'partition-id'; start the SuperNode with --node-config"
    ):
        client_spec(_context({}, run_config))
    with pytest.raises(
        ConfigError, match=r"node 7: num-partitions = 3 in its node config, but the run has federation.num_clients = 2"
    ):
        client_spec(_context({"partition-id": 0, "num-partitions": 3}, run_config))
    with pytest.raises(ConfigError, match="node 7: partition-id = 2; allowed: 0 to 1"):
        client_spec(_context({"partition-id": 2, "num-partitions": 2}, run_config))
    spec, _ = client_spec(_context({"partition-id": 1, "num-partitions": 2}, run_config))
    assert spec.run_dir == tmp_path.resolve() and len(spec.partitions) == 2


def test_a_clientapp_that_cannot_find_its_data_names_its_node_and_the_path(tmp_path):
    import numpy as np

    from fedsim.engine.deployment.app import client_spec

    data = tmp_path / "faces.npz"  # there where the run was submitted, not where the SuperNode runs
    rng = np.random.default_rng(0)
    np.savez(data, x=rng.integers(0, 255, (20, 8, 8), dtype=np.uint8), y=np.arange(20) % 2)
    run_config = to_run_config(
        RunRequest(config=tiny_config(data={"dataset": "npz", "path": str(data)}), run_dir=tmp_path)
    )
    data.unlink()
    with pytest.raises(ConfigError, match=rf"node 7 \(partition 0\): data.path = '{data}': no such file"):
        client_spec(_context({"partition-id": 0, "num-partitions": 2}, run_config))


def test_the_partitions_a_clientapp_derives_are_the_servers(tmp_path):
    from fedsim.engine.assembly import federation_of
    from fedsim.engine.deployment.app import client_spec

    config = tiny_config(data={"partition": {"name": "dirichlet", "alpha": 0.5}})
    spec, _ = client_spec(
        _context({"partition-id": 0, "num-partitions": 2}, to_run_config(RunRequest(config, tmp_path)))
    )
    server = federation_of(config)
    assert all((a == b).all() for a, b in zip(spec.partitions, server.partitions, strict=True))
