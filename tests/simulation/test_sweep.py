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
