"""A run on a local SuperLink with two SuperNodes is the simulation's run, and a local federation stopped midway
leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from repository import REPO_ROOT
from tiny_configs import tiny_config, tiny_raw

from fedsim.engine.deployment.run_config import RunRequest


def _rows(run_dir: Path, event: str) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    drop = {"time", "seconds", "schema"}
    return sorted(
        ({k: v for k, v in row.items() if k not in drop} for row in rows if row["event"] == event),
        key=lambda row: (row["round"], str(row.get("client", row.get("target")))),
    )


@pytest.mark.simulation
def test_a_run_on_a_superlink_with_two_supernodes_is_the_simulations_run(tmp_path):
    from fedsim.engine.deployment.local_federation import LocalFederation
    from fedsim.engine.deployment.submit import SuperLink, submit
    from fedsim.engine.run import run_experiment

    config = tiny_config(
        name="deployed",
        data={"image_size": 8, "max_train_samples": 40, "max_test_samples": 40},
        federation={"rounds": 1},  # each round starts a ClientApp process per node and message: one is enough
        client={"batch_size": 2},
        adversary={"tap": "mitm", "rounds": [1], "attacks": [{"name": "dlg", "iterations": 5, "restarts": 1}]},
        output={"dir": str(tmp_path / "runs")},
    )
    federation = LocalFederation(num_nodes=2, workdir=tmp_path / "federation")
    try:
        federation.start()
        deployed = submit(
            RunRequest(config, run_dir=tmp_path / "runs" / "deployed"), SuperLink(federation.address, insecure=True)
        )
    finally:
        federation.stop()  # every process started here, by its own pid
    assert all(process.poll() is not None for process in federation.processes.values())
    simulated = run_experiment(config, quiet=True, run_dir=tmp_path / "runs" / "simulated")

    assert json.loads((deployed / "environment.json").read_text())["engine"] == "deployment"
    assert json.loads((simulated / "environment.json").read_text())["engine"] == "simulation"
    assert (deployed / "config.yaml").read_text() == (simulated / "config.yaml").read_text()
    assert [row["round"] for row in _rows(deployed, "eval")] == [0, 1]
    assert _rows(deployed, "eval") == _rows(simulated, "eval")  # accuracy, loss, counts: the same rounds
    assert _rows(deployed, "fit") == _rows(simulated, "fit")
    attacks = _rows(deployed, "attack")
    assert [(row["round"], row["target"], row["status"]) for row in attacks] == [
        (1, "client:0", "ok"),
        (1, "client:1", "ok"),
    ]
    assert attacks == _rows(simulated, "attack")  # the mitm tap saw the same updates: the same reconstructions
    for server_round in (0, 1):
        name = f"checkpoints/round_{server_round:04d}.pt"
        a, b = torch.load(deployed / name, weights_only=True), torch.load(simulated / name, weights_only=True)
        assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "(gone)"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process tree from Linux's /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_local_federation_stopped_midway_leaves_no_process_it_started(tmp_path, signum):
    """SIGTERM (as `timeout` sends) or SIGKILL to the local federation's process while its clients train: every
    process under it (SuperLink, SuperNodes, Flower's SuperExec, ServerApp and ClientApp processes, the attack
    workers, the submitter) is gone soon after, although Flower starts some of them in sessions of their own."""
    from processes import still_running

    from fedsim.core.processes import descendants

    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            tiny_raw(
                name="stopped",
                data={"image_size": 8, "max_train_samples": 40, "max_test_samples": 40},
                federation={"rounds": 3},
                adversary={"tap": "mitm", "rounds": [1], "attacks": [{"name": "dlg", "iterations": 5}]},
                output={"dir": str(tmp_path / "runs")},
            )
        )
    )
    federation = subprocess.Popen(
        [sys.executable, "-m", "fedsim.engine.deployment.local_federation", str(config)],
        cwd=REPO_ROOT,
        start_new_session=True,  # the signal goes to this process alone, not to pytest's group
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    started, seen = time.monotonic(), set()
    while not any("flwr-clientapp" in _command_line(pid) for pid, _ in seen):  # midway: a client at work
        assert federation.poll() is None, f"it ended before a client started: {federation.stderr.read()[-2000:]}"
        assert time.monotonic() - started < 240, "no ClientApp process started in 240 s"
        seen |= descendants(federation.pid)
        time.sleep(0.1)
    seen |= descendants(federation.pid)
    assert any("flwr-serverapp" in _command_line(pid) for pid, _ in seen)
    os.kill(federation.pid, signum)
    _, err = federation.communicate(timeout=60)

    left = still_running(list(seen))  # a worker still importing torch notices its dead server only after that
    assert left == [], [_command_line(pid) for pid, _ in left]
    if signum == signal.SIGTERM:
        assert federation.returncode == 128 + signal.SIGTERM, err[-2000:]
        assert err.strip().splitlines()[-1].startswith("fedsim: stopped by SIGTERM;")
