"""A real sweep: each point its own run, a second sweep skips finished runs, a killed one resumes."""

import json
import shutil

import pytest
from sweep_configs import run_cli

from fedsim.config import load_config
from fedsim.rundir.writer import RunStore
from fedsim.sweep import plan_sweep, run_sweep


@pytest.mark.simulation
def test_every_point_runs_as_its_own_run_under_the_sweep(tiny_sweep):
    manifest = json.loads((tiny_sweep / "sweep.json").read_text())
    assert manifest["grid"] == {"client.defenses": ["none", "noise"]}
    assert [(p["name"], p["status"]) for p in manifest["points"]] == [
        ("00-defenses-none", "complete"),
        ("01-defenses-noise", "complete"),
    ]
    noise = load_config(tiny_sweep / "01-defenses-noise" / "config.yaml")
    assert noise.client.defenses[0].name == "noise"
    rows = RunStore(tiny_sweep / "01-defenses-noise").rows()
    assert any(row["event"] == "fit" and "defense.noise.norm_after" in row for row in rows)
    assert sorted(row["target"] for row in rows if row["event"] == "attack") == ["aggregate", "client:0", "client:1"]


@pytest.mark.simulation
def test_a_second_sweep_skips_finished_runs(tiny_sweep, capsys):
    before = {p: p.stat().st_mtime_ns for p in tiny_sweep.glob("*/metrics.jsonl")}
    code, out, _ = run_cli(capsys, "sweep", "--resume", str(tiny_sweep), "--quiet")
    assert code == 0 and out.strip() == str(tiny_sweep)
    assert {p: p.stat().st_mtime_ns for p in tiny_sweep.glob("*/metrics.jsonl")} == before
    assert {p["status"] for p in json.loads((tiny_sweep / "sweep.json").read_text())["points"]} == {"complete"}


@pytest.mark.simulation
def test_a_killed_sweep_resumes_its_half_finished_run(tiny_sweep, tmp_path):
    sweep = tmp_path / "copy"
    shutil.copytree(tiny_sweep, sweep)
    half = sweep / "01-defenses-noise"  # as if killed after round 0 was committed
    (half / "summary.json").unlink()
    (half / "checkpoints" / "round_0001.pt").unlink()
    expected = [row for row in RunStore(half).rows() if row["event"] == "eval"]
    plan = plan_sweep(resume=sweep)
    outcomes = run_sweep(plan, quiet=True)
    assert [(o.name, o.status) for o in outcomes] == [("01-defenses-noise", "complete")]  # the other is skipped
    evals = [row for row in RunStore(half).rows() if row["event"] == "eval"]
    assert [row["round"] for row in evals] == [0, 1]
    assert evals[1]["accuracy"] == expected[1]["accuracy"]  # the resumed round repeats the killed one


def test_sigterm_stops_a_sweep_cleanly_and_its_resume_finishes_every_point(tmp_path):
    """SIGTERM while the first point plays its rounds: that run stops without committing its round in progress,
    the second never starts, every process ends (no orphan runs on), the exit status is 143 with one line naming the
    sweep to resume, and `fedsim sweep --resume` finishes both points."""
    import re
    import signal
    import subprocess
    import sys

    import yaml
    from processes import signal_when, still_running
    from tiny_configs import tiny_raw

    rounds = 4
    raw = tiny_raw(
        name="stopped",
        model={"name": "cnn", "width": 16},
        federation={"rounds": rounds},
        client={"local_steps": 30},
        sweep={"grid": {"client.lr": [0.05, 0.1]}},
    )
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump(raw))
    sweep = tmp_path / "sweep"
    fedsim = [sys.executable, "-m", "fedsim.cli", "sweep"]
    process = subprocess.Popen(
        [*fedsim, str(config), "--out", str(sweep), "--quiet"],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    children = signal_when(process, sweep / "00-lr-0.05" / "checkpoints" / "round_0001.pt", signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert still_running(children) == []
    assert process.returncode == 143, err[-2000:]
    assert err.strip().splitlines()[-1] == f"fedsim: interrupted; resume with `fedsim sweep --resume {sweep}`", err[
        -4000:
    ]
    statuses = {point["name"]: point["status"] for point in json.loads((sweep / "sweep.json").read_text())["points"]}
    assert statuses == {"00-lr-0.05": "interrupted", "01-lr-0.1": "pending"}
    assert RunStore(sweep / "00-lr-0.05").last_committed_round() < rounds
    assert not (sweep / "01-lr-0.1").exists()

    resumed = subprocess.run([*fedsim, "--resume", str(sweep), "--quiet"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    # one Ray for both points, and each point's time said: the second started nothing
    assert resumed.stderr.count("starting Ray") == 1 and "Ray: kept from the previous run" in resumed.stderr
    overhead = r"rounds [\d.]+s, attacks after the last round [\d.]+s, overhead [\d.]+s; started"
    assert re.search(rf"sweep point 00-lr-0.05 complete \(\d+s: {overhead} Ray\)", resumed.stderr)
    assert re.search(rf"sweep point 01-lr-0.1 complete \(\d+s: {overhead} nothing", resumed.stderr)
    for point in statuses:
        evals = [row["round"] for row in RunStore(sweep / point).rows() if row["event"] == "eval"]
        assert evals == list(range(rounds + 1))
