"""One writer per run directory: a run holds its directory's lock for its whole life (issue 29, row 3)."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest
import torch

from fedsim.config import parse_config
from fedsim.rundir.layout import RUN_LOCK_FILE
from fedsim.rundir.lock import RunDirectoryBusy
from fedsim.rundir.writer import RunStore

# A second fedsim process that resumes the run and keeps writing it (as `fedsim run --resume` would) until killed.
HOLDER = textwrap.dedent(
    """
    import sys, time
    from fedsim.rundir.writer import RunStore
    store, _, _ = RunStore.open_for_resume(sys.argv[1])
    print("holding", flush=True)
    time.sleep(600)
    """
)


@pytest.fixture
def stopped_run(tmp_path):
    """A run killed after round 1 was committed: nothing holds its directory."""
    store = RunStore.create(parse_config({}), "cpu", tmp_path / "run")
    store.append({"round": 0, "event": "eval", "accuracy": 0.1})
    store.save_checkpoint(0, {"w": torch.zeros(2)})
    store.close()
    return store.run_dir


def test_a_run_another_process_is_writing_is_refused_naming_it_until_that_process_dies(stopped_run):
    # one holder for the whole story: a process importing the writer takes seconds (torch)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(stopped_run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "holding\n", holder.stderr.read()

        with pytest.raises(RunDirectoryBusy) as refused:
            RunStore.open_for_resume(stopped_run)
        message = str(refused.value)
        assert "\n" not in message and message.startswith(f"--resume {stopped_run}: ")
        assert f"pid {holder.pid} on {socket.gethostname()} since 20" in message
        assert isinstance(refused.value, FileExistsError)  # fedsim's command line prints it as one line
        assert [row["round"] for row in RunStore(stopped_run).rows()] == [0]  # nothing was touched

        with pytest.raises(RunDirectoryBusy, match=rf"^the run directory: '{stopped_run}' is being written by pid "):
            RunStore.create(parse_config({}), "cpu", stopped_run)

        holder.send_signal(signal.SIGKILL)  # the OS drops a dead holder's lock: nothing stale is left to clear
        holder.wait()
        store, _, last = RunStore.open_for_resume(stopped_run)
        assert last == 0
        record = json.loads((stopped_run / RUN_LOCK_FILE).read_text())
        assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()
        store.close()
    finally:
        holder.kill()
        holder.wait()


def test_a_second_open_in_the_same_process_is_refused_until_the_first_is_closed(stopped_run):
    first, _, _ = RunStore.open_for_resume(stopped_run)
    with pytest.raises(RunDirectoryBusy, match=rf"pid {os.getpid()} on "):
        RunStore.open_for_resume(stopped_run)
    first.close()
    second, _, _ = RunStore.open_for_resume(stopped_run)
    second.close()
    second.close()  # closing twice is harmless


def test_a_failed_resume_releases_the_lock(stopped_run):
    with pytest.raises(Exception, match="must be >="):
        RunStore.open_for_resume(stopped_run, rounds=0)
    store, _, _ = RunStore.open_for_resume(stopped_run)
    store.close()


def test_reading_a_run_takes_no_lock(stopped_run):
    """Reports, sweeps deciding what a point needs and the clients read a run directory without claiming it."""
    writer, _, _ = RunStore.open_for_resume(stopped_run)
    assert RunStore(stopped_run).last_committed_round() == 0
    assert [row["round"] for row in RunStore(stopped_run).rows()] == [0]
    writer.close()


def test_a_run_that_fails_after_opening_its_directory_releases_the_lock(stopped_run, monkeypatch):
    import fedsim.engine.run as runner

    def broken_data(data, num_clients, seed):
        raise RuntimeError("the data went away")

    monkeypatch.setattr(runner, "prepare_federation", broken_data)
    with pytest.raises(RuntimeError, match="the data went away") as failed:
        runner.run_experiment(resume=stopped_run, quiet=True)
    # the traceback keeps the runner's frame, and its store, alive: the release must not wait for the collector
    assert failed.tb is not None
    store, _, _ = RunStore.open_for_resume(stopped_run)
    store.close()
