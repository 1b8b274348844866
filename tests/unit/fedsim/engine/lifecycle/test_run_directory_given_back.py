"""fedsim never deletes what it did not create, and a start that fails leaves nothing that blocks a retry
(issue 41, rows 1, 11 and 13)."""

from __future__ import annotations

import logging
import signal
from types import SimpleNamespace

import pytest
from tiny_configs import tiny_config

from fedsim.core.errors import ConfigError, RunInterrupted
from fedsim.core.stopping import StopSignal
from fedsim.engine.assembly import server_settings_of
from fedsim.engine.lifecycle.simulation import federation_start_line
from fedsim.engine.run import run_experiment
from fedsim.rundir.writer import RunStore


class _Engine:
    """Stands in for Flower's simulation; ``during_start`` runs as the federation starts, before round 0 commits."""

    name = "simulation"

    def __init__(self, during_start) -> None:
        self.during_start = during_start

    def environment(self) -> dict:
        return {"engine": self.name}

    def play(self, protocol, server, *args) -> None:
        self.during_start(server)


def _stop_with_sigint(server) -> None:
    server.stop.request(signal.SIGINT)
    server.stop.check()


def test_a_run_name_naming_a_folder_of_the_users_is_refused_and_nothing_is_written_into_it(tmp_path):
    docs = tmp_path / "X" / "docs"
    docs.mkdir(parents=True)
    (docs / "important.txt").write_text("notes")
    config = tiny_config(output={"dir": str(tmp_path / "X"), "run_name": "docs"})
    with pytest.raises(FileExistsError) as refused:
        RunStore.create(config, "cpu")
    assert str(refused.value) == (
        f"output.run_name: '{docs}' already exists and holds files that are not a fedsim run (important.txt); "
        "a new run goes into a new or empty folder: choose another name"
    )
    assert sorted(p.name for p in docs.iterdir()) == ["important.txt"]  # not even a run.lock


def test_a_run_stopped_before_round_zero_removes_only_its_own_files_from_a_folder_it_did_not_create(tmp_path):
    docs = tmp_path / "X" / "docs"
    docs.mkdir(parents=True)  # the user's folder, empty when the run claimed it

    def user_saves_notes_then_ctrl_c(server) -> None:
        (docs / "important.txt").write_text("notes")  # written into the folder while the run starts
        _stop_with_sigint(server)

    config = tiny_config(output={"dir": str(tmp_path / "X"), "run_name": "docs"})
    with pytest.raises(RunInterrupted) as stopped:
        run_experiment(config, quiet=True, engine=_Engine(user_saves_notes_then_ctrl_c))
    assert stopped.value.run_dir is None  # nothing to resume
    assert sorted(p.name for p in docs.iterdir()) == ["important.txt"]
    assert (docs / "important.txt").read_text() == "notes"


def test_a_run_stopped_before_round_zero_in_a_folder_it_created_leaves_no_folder(tmp_path):
    config = tiny_config(output={"dir": str(tmp_path / "X"), "run_name": "new"})
    with pytest.raises(RunInterrupted):
        run_experiment(config, quiet=True, engine=_Engine(_stop_with_sigint))
    assert list((tmp_path / "X").iterdir()) == []


def test_a_start_refused_for_its_resources_leaves_nothing_and_the_same_name_starts_again(tmp_path):
    """`--set federation.client_resources.cpus=1000 --set output.run_name=cpus`, then again with a fixed value."""
    runs = tmp_path / "runs"
    too_many = tiny_config(
        output={"dir": str(runs), "run_name": "cpus"}, federation={"client_resources": {"cpus": 1000}}
    )
    with pytest.raises(ConfigError, match=r"federation.client_resources.cpus"):
        run_experiment(too_many, quiet=True)  # refused by the machine check before Ray starts
    assert list(runs.iterdir()) == []

    fixed = tiny_config(output={"dir": str(runs), "run_name": "cpus"})
    with pytest.raises(RunInterrupted):  # claims the name this time: stopped at once, before Ray
        run_experiment(fixed, quiet=True, engine=_Engine(_stop_with_sigint))


def test_a_run_that_fails_before_round_zero_gives_its_directory_back(tmp_path):
    def crash(server) -> None:
        raise RuntimeError("the federation did not start")

    config = tiny_config(output={"dir": str(tmp_path / "runs"), "run_name": "crashed"})
    with pytest.raises(RuntimeError, match="did not start"):
        run_experiment(config, quiet=True, engine=_Engine(crash))
    assert list((tmp_path / "runs").iterdir()) == []


def test_a_run_that_fails_after_round_zero_keeps_its_directory_to_resume(tmp_path):
    def commit_round_zero_then_crash(server) -> None:
        server.store.save_checkpoint(0, server.initial_state)
        raise RuntimeError("round 1 crashed")

    config = tiny_config(output={"dir": str(tmp_path / "runs"), "run_name": "kept"})
    with pytest.raises(RuntimeError, match="round 1 crashed"):
        run_experiment(config, quiet=True, engine=_Engine(commit_round_zero_then_crash))
    assert (tmp_path / "runs" / "kept" / "checkpoints" / "round_0000.pt").is_file()


@pytest.mark.parametrize(
    ("start_round", "line_ends"), [(0, "then round 1"), (3, "then round 4 (resumed after round 3)")]
)
def test_the_federation_start_names_the_round_the_run_plays_first(start_round, line_ends):
    server = SimpleNamespace(
        start_round=start_round, settings=server_settings_of(tiny_config(federation={"num_clients": 2}))
    )
    line = federation_start_line(server)
    assert line == f"starting the federation: 2 clients in Flower's simulation, {line_ends}"


def test_a_resumed_run_logs_the_round_it_resumes_at(caplog, monkeypatch):
    import contextlib

    import flwr.simulation

    import fedsim.engine.lifecycle.simulation as runner

    for name, stand_in in (("start_ray", lambda init_args: None), ("stop_ray", lambda: None)):
        monkeypatch.setattr(runner, name, stand_in)
    monkeypatch.setattr(runner, "RayProcesses", contextlib.nullcontext)
    monkeypatch.setattr(flwr.simulation, "run_simulation", lambda **simulation: None)
    protocol = SimpleNamespace(server_app=lambda *args: None, client_app=lambda *args: None)
    config = tiny_config(federation={"num_clients": 2, "rounds": 5})
    server = SimpleNamespace(start_round=3, settings=server_settings_of(config), stop=StopSignal())
    with caplog.at_level(logging.INFO, logger="fedsim"):
        runner.SimulationEngine(config.federation, config.adversary).play(protocol, server, None, None)
    assert "then round 4 (resumed after round 3)" in caplog.text and "then round 1" not in caplog.text
