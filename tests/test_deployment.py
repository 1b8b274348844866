"""fedsim as a Flower App on the deployment engine (a SuperLink and its SuperNodes), and on a Ray cluster.

The unit tests check what travels (the run config), what is refused (one line each), and that the App is the
one ``pyproject.toml`` declares. One simulation-marked test starts a real SuperLink with two SuperNodes on
localhost and checks that a run through them is the simulation's run, row for row and weight for weight.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import torch
from flwr.app import Context, RecordDict
from tiny_configs import tiny_config

from fedsim.cli import main
from fedsim.config import ConfigError, dump_config, with_absolute_paths
from fedsim.engine.lifecycle.network import Unreachable, free_port, host_and_port, probe
from fedsim.engine.deployment.run_config import DEFAULTS, RunRequest, client_config, from_run_config, to_run_config

ROOT = Path(__file__).resolve().parents[1]


def _context(node_config: dict, run_config: dict, node_id: int = 7) -> Context:
    return Context(run_id=1, node_id=node_id, node_config=node_config, state=RecordDict(), run_config=run_config)


# --------------------------------------------------------------------------------------------- run config


def test_the_run_config_carries_the_whole_experiment_as_scalars_and_reads_back_the_same(tmp_path):
    config = tiny_config(adversary={"tap": "mitm", "attacks": [{"name": "dlg", "iterations": 5}]})
    run_config = to_run_config(RunRequest(config=config, run_dir=tmp_path / "run", submitted_by="fedsim run x"))
    assert all(isinstance(value, (str, int)) for value in run_config.values())  # Flower's run config: scalars only
    request = from_run_config(run_config)
    assert dump_config(request.config) == dump_config(with_absolute_paths(config))
    assert request.run_dir == (tmp_path / "run").resolve() and request.resume is None and request.rounds is None
    assert request.submitted_by == "fedsim run x"
    assert client_config(run_config) == (request.config, (tmp_path / "run").resolve())


def test_pyproject_declares_the_app_and_every_run_config_key_with_its_default():
    flwr = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    assert flwr["config"] == DEFAULTS  # `flwr run --run-config` may only override keys declared there
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp

    import fedsim.engine.deployment.app as app

    assert flwr["components"] == {"serverapp": "fedsim.engine.deployment.app:server_app", "clientapp": "fedsim.engine.deployment.app:client_app"}
    assert isinstance(app.server_app, ServerApp) and isinstance(app.client_app, ClientApp)


def test_the_flower_app_bundle_holds_the_packages_and_no_tests():
    import io
    import zipfile

    from flwr.cli.build import build_fab_from_disk

    names = zipfile.ZipFile(io.BytesIO(build_fab_from_disk(ROOT))).namelist()
    assert "fedsim/engine/deployment/app.py" in names and "clients/client_app.py" in names and "adversary/taps.py" in names
    assert not [name for name in names if name.startswith(("tests/", "bench/", "runs/"))]


def test_an_empty_run_config_is_every_default_and_bad_ones_are_refused_naming_the_key():
    assert dump_config(from_run_config(DEFAULTS).config) == dump_config(tiny_config().__class__())
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['seed'\]"):
        from_run_config({**DEFAULTS, "seed": 3})
    with pytest.raises(ConfigError, match="'rounds' extends a resumed run"):
        from_run_config({**DEFAULTS, "rounds": 5})
    with pytest.raises(ConfigError, match="'fedsim-config' is not valid YAML"):
        from_run_config({**DEFAULTS, "fedsim-config": "a: [1"})
    with pytest.raises(ConfigError, match="federation.num_clients"):
        from_run_config({**DEFAULTS, "fedsim-config": "federation: {num_clients: 0}"})
    with pytest.raises(ConfigError, match="'run-dir' is empty"):
        client_config(DEFAULTS)


# ------------------------------------------------------------------------------------------- client side


def test_a_supernode_without_its_partition_or_with_another_federation_size_is_refused_naming_the_node(tmp_path):
    from fedsim.engine.deployment.app import client_spec

    run_config = to_run_config(RunRequest(config=tiny_config(), run_dir=tmp_path))
    with pytest.raises(ConfigError, match=r"node 7: its node config has no 'partition-id'; start the SuperNode with --node-config"):
        client_spec(_context({}, run_config))
    with pytest.raises(ConfigError, match="node 7: num-partitions = 3 in its node config, but the run has federation.num_clients = 2"):
        client_spec(_context({"partition-id": 0, "num-partitions": 3}, run_config))
    with pytest.raises(ConfigError, match="node 7: partition-id = 2; allowed: 0 to 1"):
        client_spec(_context({"partition-id": 2, "num-partitions": 2}, run_config))
    spec, _ = client_spec(_context({"partition-id": 1, "num-partitions": 2}, run_config))
    assert spec.run_dir == tmp_path.resolve() and len(spec.partitions) == 2


def test_a_clientapp_that_cannot_find_its_data_names_its_node_and_the_path(tmp_path):
    from fedsim.engine.deployment.app import client_spec

    import numpy as np

    data = tmp_path / "faces.npz"  # there where the run was submitted, not where the SuperNode runs
    rng = np.random.default_rng(0)
    np.savez(data, x=rng.integers(0, 255, (20, 8, 8), dtype=np.uint8), y=np.arange(20) % 2)
    run_config = to_run_config(RunRequest(config=tiny_config(data={"dataset": "npz", "path": str(data)}), run_dir=tmp_path))
    data.unlink()
    with pytest.raises(ConfigError, match=rf"node 7 \(partition 0\): data.path = '{data}': no such file"):
        client_spec(_context({"partition-id": 0, "num-partitions": 2}, run_config))


def test_the_partitions_a_clientapp_derives_are_the_servers(tmp_path):
    from fedsim.engine.deployment.app import client_spec
    from fedsim.engine.lifecycle.federation import prepare_federation

    config = tiny_config(data={"partition": {"name": "dirichlet", "alpha": 0.5}})
    spec, _ = client_spec(_context({"partition-id": 0, "num-partitions": 2}, to_run_config(RunRequest(config, tmp_path))))
    server = prepare_federation(config)
    assert all((a == b).all() for a, b in zip(spec.partitions, server.partitions, strict=True))


# ------------------------------------------------------------------------------------------- submitting side


def test_an_unreachable_superlink_is_one_line_naming_the_address(capsys):
    address = f"127.0.0.1:{free_port()}"
    code = main(["run", str(ROOT / "configs/quickstart.yaml"), "--engine", "deployment", "--superlink", address, "--insecure"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert err.startswith(f"fedsim: error: --superlink = '{address}': nothing answers there (Connection refused)")


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--engine", "deployment"], "--engine deployment: give --superlink HOST:PORT"),
        (["--superlink", "127.0.0.1:9093"], "--superlink, --insecure and --root-certificates go with --engine deployment"),
        (["--engine", "deployment", "--superlink", "localhost"], "--superlink = 'localhost': expected HOST:PORT"),
        (["--engine", "deployment", "--superlink", "h:1", "--insecure", "--root-certificates", "ca.pem"], "exclude each other"),
    ],
)
def test_deployment_flags_are_checked_before_anything_is_submitted(capsys, arguments, message):
    assert main(["run", str(ROOT / "configs/quickstart.yaml"), *arguments]) == 2
    assert message in capsys.readouterr().err


def test_addresses_are_parsed_and_probed():
    assert host_and_port("[::1]:9093", "x") == ("::1", 9093)
    with pytest.raises(ConfigError, match="expected HOST:PORT"):
        host_and_port("127.0.0.1:99999", "--superlink")
    with pytest.raises(Unreachable, match="nothing answers there"):
        probe(f"127.0.0.1:{free_port()}", "--superlink")


def test_a_new_deployed_run_gets_an_absolute_run_directory_and_its_config_no_engine(tmp_path, monkeypatch):
    from fedsim.engine.deployment.submit import planned_run_dir

    monkeypatch.chdir(tmp_path)
    config = tiny_config(name="tiny", output={"dir": "runs"})
    first = planned_run_dir(config)
    assert first.is_absolute() and first.parent == tmp_path / "runs" and first.name.startswith("tiny-")
    first.mkdir(parents=True)
    assert planned_run_dir(config).name == first.name + "-2"
    assert "engine" not in dump_config(config) and "superlink" not in dump_config(config)


# ------------------------------------------------------------------------------------------------ Ray cluster


def test_a_ray_cluster_address_joins_the_cluster_without_capping_it(monkeypatch):
    from fedsim.engine.lifecycle.runner import _backend_config

    config = tiny_config(adversary={"attacks": [{"name": "dlg"}]})
    own = _backend_config(config, {"num_cpus": 2})
    assert own["init_args"]["num_cpus"] >= 1 and own["init_args"]["address"] == "local"  # never a `ray start` cluster
    joined = _backend_config(config, {"num_cpus": 2}, ray_address="10.0.0.1:6379")
    assert joined["init_args"]["address"] == "10.0.0.1:6379"
    assert "num_cpus" not in joined["init_args"] and "num_gpus" not in joined["init_args"]  # Ray refuses them there


def test_a_ray_cluster_that_is_not_there_is_one_line_naming_the_setting(monkeypatch):
    from fedsim.engine.lifecycle.runner import cluster_address

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cluster_address(tiny_config()) is None
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(ConfigError, match=rf"federation.ray_address = '{address}': nothing answers there"):
        cluster_address(tiny_config(federation={"ray_address": address}))
    monkeypatch.setenv("RAY_ADDRESS", address)
    with pytest.raises(ConfigError, match=rf"RAY_ADDRESS = '{address}': nothing answers there"):
        cluster_address(tiny_config())


# ------------------------------------------------------------------------------------- a real SuperLink


def _rows(run_dir: Path, event: str) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    drop = {"time", "seconds", "schema"}
    return sorted(({k: v for k, v in row.items() if k not in drop} for row in rows if row["event"] == event),
                  key=lambda row: (row["round"], str(row.get("client", row.get("target")))))  # fmt: skip


@pytest.mark.simulation
def test_a_run_on_a_superlink_with_two_supernodes_is_the_simulations_run(tmp_path):
    from fedsim.engine.deployment.submit import SuperLink, submit
    from fedsim.engine.deployment.local_federation import LocalFederation
    from fedsim.engine.lifecycle.runner import run_experiment

    config = tiny_config(
        name="deployed",
        data={"image_size": 8, "max_train_samples": 40, "max_test_samples": 40},
        federation={"rounds": 2},
        client={"batch_size": 2},
        adversary={"tap": "mitm", "rounds": [2], "attacks": [{"name": "dlg", "iterations": 5, "restarts": 1}]},
        output={"dir": str(tmp_path / "runs")},
    )
    federation = LocalFederation(num_nodes=2, workdir=tmp_path / "federation")
    try:
        federation.start()
        deployed = submit(RunRequest(config, run_dir=tmp_path / "runs" / "deployed"), SuperLink(federation.address, insecure=True))
    finally:
        federation.stop()  # every process started here, by its own pid
    assert all(process.poll() is not None for process in federation.processes.values())
    simulated = run_experiment(config, quiet=True, run_dir=tmp_path / "runs" / "simulated")

    assert json.loads((deployed / "environment.json").read_text())["engine"] == "deployment"
    assert json.loads((simulated / "environment.json").read_text())["engine"] == "simulation"
    assert (deployed / "config.yaml").read_text() == (simulated / "config.yaml").read_text()
    assert [row["round"] for row in _rows(deployed, "eval")] == [0, 1, 2]
    assert _rows(deployed, "eval") == _rows(simulated, "eval")  # accuracy, loss, counts: the same rounds
    assert _rows(deployed, "fit") == _rows(simulated, "fit")
    attacks = _rows(deployed, "attack")
    assert [(row["round"], row["target"], row["status"]) for row in attacks] == [(2, "client:0", "ok"), (2, "client:1", "ok")]
    assert attacks == _rows(simulated, "attack")  # the mitm tap saw the same updates: the same reconstructions
    for server_round in (0, 1, 2):
        name = f"checkpoints/round_{server_round:04d}.pt"
        a, b = torch.load(deployed / name, weights_only=True), torch.load(simulated / name, weights_only=True)
        assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


class _FakeFlowerCli:
    """Answers `flwr log RUN --show` with a given log."""

    def __init__(self, log: str) -> None:
        self.log = log

    def __call__(self, *arguments: str, timeout: float = 0) -> str:
        assert arguments[0] == "log" and "--show" in arguments
        return self.log


def test_a_failed_run_is_one_line_with_its_serverapps_last_error():
    from fedsim.core.errors import TrainingFailed
    from fedsim.engine.deployment.submit import DeploymentError, SuperLink, run_failure

    superlink = SuperLink("127.0.0.1:9093", insecure=True)
    log = "INFO: Start `flwr-serverapp` process\nTraceback (most recent call last):\n" \
          "RuntimeError: client roll call failed: node 12 (partition 1): data.path = '/d.npz': no such file\n"  # fmt: skip
    error = run_failure(_FakeFlowerCli(log), "42", "finished:failed", superlink)
    assert isinstance(error, DeploymentError) and "\n" not in str(error)
    assert str(error) == ("Flower run 42 on the SuperLink at 127.0.0.1:9093 ended finished:failed: RuntimeError: client "
                          "roll call failed: node 12 (partition 1): data.path = '/d.npz': no such file")  # fmt: skip
    untrained = run_failure(_FakeFlowerCli("fedsim.core.TrainingFailed: no round updated the global model\n"), "42",
                            "finished:failed", superlink)  # fmt: skip
    assert isinstance(untrained, TrainingFailed) and str(untrained) == "no round updated the global model"
    silent = run_failure(_FakeFlowerCli(""), "42", "finished:stopped", superlink)
    assert str(silent).endswith("ended finished:stopped: see `flwr log 42` against 127.0.0.1:9093")


def test_the_flower_connection_is_insecure_or_trusts_the_given_ca_or_the_systems(tmp_path):
    from fedsim.engine.deployment.submit import SuperLink

    assert SuperLink("h:1", insecure=True).connection()["superlink"]["fedsim"] == {"address": "h:1", "insecure": True}
    trusted = SuperLink("h:1", root_certificates=tmp_path / "ca.crt").connection()["superlink"]["fedsim"]
    assert trusted == {"address": "h:1", "root-certificates": str(tmp_path / "ca.crt")}
    assert SuperLink("h:1").connection()["superlink"] == {"default": "fedsim", "fedsim": {"address": "h:1"}}


def test_the_superlinks_error_for_a_vanished_node_counts_as_that_nodes_reply(task_identity):
    """A SuperNode that stops heartbeating gets an error reply from the SuperLink itself (node id 1)."""
    from flwr.app import ConfigRecord, Error, Message

    from fedsim.core.messaging import collect_replies

    to_node = Message(RecordDict({"config": ConfigRecord({"server-round": 2})}), dst_node_id=5, message_type="train")

    class VanishedNodeGrid:
        def push_messages(self, messages):
            for message in messages:
                message.metadata.__dict__["_message_id"] = "m5"  # as Flower's grid stamps a pushed message
            return ["m5"]

        def pull_messages(self, ids):
            stand_in = Message(Error(code=3, reason="Error: Node Unavailable"), reply_to=to_node)
            stand_in.metadata.__dict__["_src_node_id"] = 1  # the SuperLink's node id, as Flower sends it
            return [stand_in]

    seen = []
    replies = collect_replies(VanishedNodeGrid(), [to_node], timeout=5, on_reply=seen.append)
    assert [reply.metadata.src_node_id for reply in seen] == [5] and replies == seen
    assert seen[0].error.reason == "Error: Node Unavailable" and seen[0].metadata.reply_to_message_id == "m5"
