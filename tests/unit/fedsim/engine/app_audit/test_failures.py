"""An audited app that fails, or a stop before it starts: one line naming the log, and no run directory left
that holds nothing (Flower's simulation: a stand-in)."""

from __future__ import annotations

import signal
import tempfile
import types

import pytest
from flower_apps import QUICKSTART_APP, QUICKSTART_AUDIT, write_image_parquet
from tiny_configs import tiny_config

import fedsim.engine.app_audit.runner as runner
from fedsim.cli import main
from fedsim.core.stopping import StopRequested, StopSignal


def test_an_app_whose_server_app_raises_is_one_line_with_its_traceback_logged_and_leaves_no_directory(
    tmp_path, monkeypatch, capsys
):
    def server_app_raises(*args, **kwargs):  # what Flower's _run_simulation re-raises from the ServerApp's thread
        raise ValueError("the app's strategy needs min_available_nodes >= 2")

    monkeypatch.setattr(runner, "run_app", server_app_raises)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the traceback goes
    monkeypatch.chdir(tmp_path)
    data = write_image_parquet(tmp_path / "images.parquet", 10)
    runs = tmp_path / "runs"
    code = main(
        [
            "audit",
            str(QUICKSTART_APP),
            "--config",
            str(QUICKSTART_AUDIT),
            "--set",
            "app.num_supernodes=2",
            "--set",
            f"output.dir={runs}",
            "--run-config",
            f'num-server-rounds=1 data-files="{data}"',
            "--quiet",
        ]
    )
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and not any("Traceback" in line for line in lines)
    assert lines[-1].startswith(
        "fedsim: error: the Flower app failed: ValueError: the app's strategy needs min_available_nodes >= 2; "
        "no run directory was kept (traceback in "
    )
    (log,) = tmp_path.glob("fedsim-audit-*.log")
    assert str(log) in lines[-1] and "server_app_raises" in log.read_text()
    assert list(runs.iterdir()) == []  # was: an empty run directory that no report or retry could use


def test_a_stop_asked_for_before_the_app_starts_starts_neither_ray_nor_the_app(monkeypatch):
    started = []
    monkeypatch.setattr(runner, "start_ray", lambda init_args: started.append("ray"))
    monkeypatch.setattr(runner, "stop_ray", lambda: started.append("stop"))
    stop = StopSignal()
    stop.request(signal.SIGINT)
    app = types.SimpleNamespace(name="app", path=QUICKSTART_APP, overrides={}, run_config={})
    with pytest.raises(StopRequested):
        runner.run_app(app, None, None, tiny_config(), None, stop=stop)
    assert started == []
