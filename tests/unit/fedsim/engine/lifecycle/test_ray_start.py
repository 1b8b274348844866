"""Ray that does not start (its node timed out on a loaded machine) is one line naming Ray's logs, not a traceback."""

from __future__ import annotations

import os

import ray
import yaml
from tiny_configs import tiny_raw

from fedsim.cli import main

# what ray._private.node raises after 30 s without the raylet registering with the GCS
NODE_TIMEOUT = (
    "The current node timed out during startup. This could happen because some of the raylet failed to startup or "
    "the GCS has become overloaded."
)


def test_a_ray_node_that_times_out_during_startup_is_one_line_naming_rays_logs(tmp_path, capsys, monkeypatch):
    def node_timed_out(*args, **kwargs):
        raise Exception(NODE_TIMEOUT)

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", node_timed_out)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "ray-temp"))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # start_ray extends it for Ray's workers
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_raw(output={"dir": str(tmp_path / "runs")})))

    code = main(["run", str(config), "--quiet"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert lines[-1].startswith(f"fedsim: error: Ray did not start: {NODE_TIMEOUT}; Ray's logs: ")
    assert str(tmp_path / "ray-temp" / "ray" / "session_latest" / "logs") in lines[-1]
    assert not any("Traceback" in line for line in lines)


def test_rays_workers_start_at_the_runs_own_priority_unless_the_user_set_one(monkeypatch):
    from fedsim.engine.lifecycle.ray_resources import RAY_WORKER_NICENESS, start_ray

    started = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: started.append(os.environ.get(RAY_WORKER_NICENESS)))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.delenv(RAY_WORKER_NICENESS, raising=False)
    start_ray({"num_cpus": 1})
    monkeypatch.setenv(RAY_WORKER_NICENESS, "5")
    start_ray({"num_cpus": 1})
    assert started == ["0", "5"]  # Ray's default, 15, starves the client actors on a busy machine
