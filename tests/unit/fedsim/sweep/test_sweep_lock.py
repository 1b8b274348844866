"""One process runs a sweep directory at a time, and a point is marked failed only when its run fails
(issue 41, row 3: two `fedsim sweep --resume` of one sweep at once)."""

import json
import logging
from pathlib import Path

import pytest
from sweep_configs import BASE, run_cli, write

import fedsim.sweep
from fedsim.rundir.lock import RunDirectoryBusy, RunLock
from fedsim.rundir.writer import RunStore
from fedsim.sweep import plan_sweep, run_sweep
from fedsim.sweep.execute import PointJob, execute_point, point_action


def _a_sweep_running(sweep_dir) -> RunLock:
    """What the first `fedsim sweep --resume` holds while it runs (a second open in one process is refused too)."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    return RunLock.acquire(sweep_dir, "sweep", name="sweep.lock")


def test_a_second_sweep_of_one_directory_is_refused_in_one_line_and_runs_nothing(tmp_path, monkeypatch):
    plan = plan_sweep(write(tmp_path, BASE), grid=["seed=0,1"], out=tmp_path / "s")
    ran = []
    monkeypatch.setattr(fedsim.sweep, "run_points", lambda *args, **kwargs: ran.append(args))
    first = _a_sweep_running(plan.sweep_dir)
    with pytest.raises(RunDirectoryBusy) as refused:
        run_sweep(plan)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"sweep: '{plan.sweep_dir}' is being written by pid ")
    assert message.endswith("; one process runs a sweep at a time: wait for it to end or stop it, then try again")
    assert ran == [] and not (plan.sweep_dir / "sweep.json").exists()
    first.release()
    run_sweep(plan)  # once the first one has ended, the sweep goes on
    assert len(ran) == 1


def test_fedsim_sweep_resume_while_another_runs_it_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    plan = plan_sweep(write(tmp_path, BASE), grid=["seed=0,1"], out=tmp_path / "s")
    monkeypatch.setattr(fedsim.sweep, "run_points", lambda *args, **kwargs: [])
    run_sweep(plan)  # the sweep exists (sweep.yaml, sweep.lock)
    first = _a_sweep_running(plan.sweep_dir)
    code, _, err = run_cli(capsys, "sweep", "--resume", str(plan.sweep_dir), "--quiet")
    first.release()
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "one process runs a sweep at a time" in err


def test_a_point_whose_run_another_process_writes_stays_pending_and_is_not_marked_failed(tmp_path, capsys, caplog):
    plan = plan_sweep(write(tmp_path, BASE), grid=["seed=0"], out=tmp_path / "s")
    point = plan.points[0]
    run_dir = plan.sweep_dir / point.name
    writer = RunStore.create(point.config, "cpu", run_dir)  # a `fedsim run --resume` of that point, still going
    writer.save_checkpoint(0, {})
    assert point_action(point, run_dir) == "resume"
    with caplog.at_level(logging.INFO, logger="fedsim"):
        outcomes = run_sweep(plan)
    writer.close()
    (outcome,) = outcomes
    assert outcome.status == "busy" and f"'{run_dir}' is being written by pid " in outcome.error
    (recorded,) = json.loads((plan.sweep_dir / "sweep.json").read_text())["points"]
    assert recorded["status"] == "pending" and recorded["error"] == outcome.error
    assert "Traceback" not in caplog.text and all(record.exc_info is None for record in caplog.records)


def test_a_point_that_fails_is_one_line_and_its_traceback_goes_to_a_log(tmp_path, caplog, monkeypatch):
    import tempfile

    import fedsim.engine.run as runner

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def crash(*args, **kwargs):
        raise ValueError("a bug\nwith a second line")

    monkeypatch.setattr(runner, "run_experiment", crash)
    plan = plan_sweep(write(tmp_path, BASE), grid=["seed=0"], out=tmp_path / "s")
    point = plan.points[0]
    with caplog.at_level(logging.INFO, logger="fedsim"):
        outcome = execute_point(PointJob(point.name, point.config, plan.sweep_dir / point.name, "run", None, True))
    assert outcome.status == "failed"
    assert outcome.error.startswith("ValueError: a bug (traceback in ")
    log = Path(outcome.error.rpartition("(traceback in ")[2].removesuffix(")"))
    assert log.parent == tmp_path and "Traceback" in log.read_text() and "Traceback" not in caplog.text
