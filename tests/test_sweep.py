"""`fedsim sweep`: grid expansion and validation up front, resuming, and a real sweep of two tiny runs."""

import json
import logging
import shutil
from pathlib import Path

import pytest
import yaml

from fedsim.cli import main
from fedsim.config import ConfigError, load_config, parse_config
from fedsim.rundir.writer import RunStore
from fedsim.sweep import plan_sweep, run_sweep
from fedsim.sweep.execute import point_action, ray_share
from fedsim.sweep.grid import parse_grid_arg, split_top_level
from tiny_configs import tiny_raw

BASE = tiny_raw(name="g", seed=0, federation={"num_clients": 4, "rounds": 2})


def write(tmp_path: Path, raw: dict, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return path


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------- grid and validation


def test_grid_values_split_on_top_level_commas_only():
    assert split_top_level("[],[{name: prune, ratio: 0.9}],'a,b'") == ["[]", "[{name: prune, ratio: 0.9}]", "'a,b'"]
    axis = parse_grid_arg("client.defenses=[],[{name: prune, ratio: 0.9}]")
    assert axis.key == "client.defenses"
    assert axis.values == (("none", []), ("name-prune-ratio-0.9", [{"name": "prune", "ratio": 0.9}]))


def test_the_grid_is_the_cartesian_product_of_the_config_section_and_the_command_line(tmp_path):
    raw = {**BASE, "sweep": {"grid": {"client.defenses": {"none": [], "prune": [{"name": "prune", "ratio": 0.5}]}}}}
    plan = plan_sweep(write(tmp_path, raw), grid=["client.lr=0.01,0.1"], out=tmp_path / "s")
    assert [p.name for p in plan.points] == [
        "00-defenses-none_lr-0.01", "01-defenses-none_lr-0.1",
        "02-defenses-prune_lr-0.01", "03-defenses-prune_lr-0.1",
    ]  # fmt: skip
    point = plan.points[3]
    assert point.overrides == {"client.defenses": [{"name": "prune", "ratio": 0.5}], "client.lr": 0.1}
    assert point.config.client.lr == 0.1 and point.config.client.defenses[0].ratio == 0.5
    assert point.config.output.dir == tmp_path / "s" and point.config.output.run_name == point.name
    assert not (tmp_path / "s").exists()  # planning writes nothing


def test_list_indexes_reach_into_the_base_config(tmp_path):
    plan = plan_sweep(write(tmp_path, BASE), overrides=["client.defenses=[{name: noise, sigma: 0.5}]"],
                      grid=["client.defenses.0.sigma=1e-3,1e-2"], out=tmp_path / "s")  # fmt: skip
    assert [p.config.client.defenses[0].sigma for p in plan.points] == [1e-3, 1e-2]
    assert [p.name for p in plan.points] == ["00-sigma-1e-3", "01-sigma-1e-2"]


def test_a_base_that_needs_the_grid_is_checked_point_by_point(tmp_path):
    path = write(tmp_path, BASE)
    plan = plan_sweep(path, overrides=["client.defenses.0.name=noise"], grid=["client.defenses.0.sigma=0.1,1"])
    assert [p.config.client.defenses[0].sigma for p in plan.points] == [0.1, 1.0]
    assert plan.sweep_dir.parent == Path("runs") and plan.sweep_dir.name.startswith("g-sweep-")
    with pytest.raises(ConfigError, match=r"^grid point client.defenses.0.sigma=-1: client.defenses\[0\].sigma = -1"):
        plan_sweep(path, overrides=["client.defenses.0.name=noise"], grid=["client.defenses.0.sigma=0.1,-1"])


def test_a_grid_key_replaces_the_config_axes_it_overlaps(tmp_path):
    raw = {**BASE, "sweep": {"grid": {"client.defenses": {"none": []}, "seed": [0, 1]}}}
    plan = plan_sweep(write(tmp_path, raw), overrides=["client.defenses=[{name: noise, sigma: 0.5}]"],
                      grid=["client.defenses.0.sigma=0.1,0.2"], out=tmp_path / "s")  # fmt: skip
    assert [axis.key for axis in plan.axes] == ["seed", "client.defenses.0.sigma"]
    assert len(plan.points) == 4


def test_a_bad_key_in_grid_fails_before_anything_runs(capsys, tmp_path):
    code, _, err = run_cli(capsys, "sweep", str(write(tmp_path, BASE)), "--grid", "client.lrr=0.1,0.2",
                           "--out", str(tmp_path / "s"))  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "--grid client.lrr=0.1" in err and "did you mean 'lr'" in err and "allowed here:" in err
    assert not (tmp_path / "s").exists()


def test_a_bad_value_names_the_key_the_value_and_what_is_allowed(capsys, tmp_path):
    code, _, err = run_cli(capsys, "sweep", str(write(tmp_path, BASE)), "--grid", "client.lr=0.1,-1",
                           "--grid", "seed=0,1", "--out", str(tmp_path / "s"))  # fmt: skip
    assert code == 2 and err.strip() == "fedsim: error: --grid client.lr=-1: client.lr = -1: Input should be greater than 0"
    assert not (tmp_path / "s").exists()


def test_a_bad_combination_fails_before_anything_runs(tmp_path):
    raw = {**BASE, "federation": {"num_clients": 4, "rounds": 2, "failures": [{"round": 1, "client": 3}]}}
    with pytest.raises(ConfigError, match=r"--grid federation.num_clients=2: federation.failures.client = 3"):
        plan_sweep(write(tmp_path, raw), grid=["federation.num_clients=4,2"], out=tmp_path / "s")


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        ({"grid": {}}, "sweep.grid: grid = {}: give at least one key"),
        ({"grid": {"seed": []}}, "sweep.grid: grid.seed = []: give at least one value"),
        ({"grid": {"seed": [1]}, "grd": 1}, "sweep.grd"),
        ([1, 2], "sweep must be a mapping"),
    ],
)
def test_the_sweep_section_is_validated(tmp_path, sweep, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]").replace("{", r"\{").replace("}", r"\}")):
        plan_sweep(write(tmp_path, {**BASE, "sweep": sweep}), out=tmp_path / "s")


def test_the_sweep_owns_where_runs_go(tmp_path):
    with pytest.raises(ConfigError, match="not sweepable"):
        plan_sweep(write(tmp_path, BASE), grid=["output.dir=a,b"], out=tmp_path / "s")


def test_run_and_validate_accept_a_sweep_config(capsys, tmp_path, caplog):
    path = write(tmp_path, {**BASE, "sweep": {"grid": {"seed": [0, 1, 2]}}})
    fedsim_logger = logging.getLogger("fedsim")
    propagate, fedsim_logger.propagate = fedsim_logger.propagate, True  # the CLI turns it off; caplog listens at the root
    try:
        with caplog.at_level(logging.WARNING, logger="fedsim"):
            assert load_config(path).seed == 0  # `fedsim run` runs the base point
    finally:
        fedsim_logger.propagate = propagate
    assert "fedsim sweep" in caplog.text
    code, out, _ = run_cli(capsys, "validate", str(path))
    assert code == 0 and "valid sweep of 3 point(s) over seed" in out


def test_parallel_runs_split_the_cpus_and_refuse_what_does_not_fit(tmp_path):
    plan = plan_sweep(write(tmp_path, BASE), grid=["seed=0,1"], out=tmp_path / "s")
    assert ray_share(plan.points, parallel=1, cpus=None) is None  # one run at a time: the whole machine
    assert ray_share(plan.points, parallel=2, cpus=4) == {"num_cpus": 2}
    with pytest.raises(ConfigError, match="--parallel 4: each run gets 1 of 4 CPU"):
        heavy = plan_sweep(write(tmp_path, BASE), overrides=["federation.client_resources.cpus=2"],
                           grid=["seed=0,1"], out=tmp_path / "s")  # fmt: skip
        ray_share(heavy.points, parallel=4, cpus=4)
    with pytest.raises(ConfigError, match="allowed: --parallel <= 2"):
        ray_share(plan.points, parallel=3, cpus=2)


# ------------------------------------------------------------------------------------------ resuming


def _fake_run(run_dir: Path, config, *, committed: bool, summary_rounds: int | None) -> None:
    store = RunStore.create(config, "cpu", run_dir)
    if committed:
        store.save_checkpoint(0, {})
    if summary_rounds is not None:
        store.write_json("summary.json", {"rounds_completed": summary_rounds})


def test_each_point_gets_what_its_run_directory_needs(tmp_path):
    plan = plan_sweep(write(tmp_path, BASE), grid=["seed=0,1,2,3,4"], out=tmp_path / "s")
    new, done, half, unstarted, short = plan.points
    _fake_run(tmp_path / "s" / done.name, done.config, committed=True, summary_rounds=2)
    _fake_run(tmp_path / "s" / half.name, half.config, committed=True, summary_rounds=None)
    _fake_run(tmp_path / "s" / unstarted.name, unstarted.config, committed=False, summary_rounds=None)
    _fake_run(tmp_path / "s" / short.name, short.config, committed=True, summary_rounds=1)  # stopped early
    actions = [point_action(p, tmp_path / "s" / p.name) for p in plan.points]
    assert actions == ["run", "skip", "resume", "restart", "resume"]


def test_a_run_directory_of_another_config_is_refused_before_anything_runs(tmp_path):
    plan = plan_sweep(write(tmp_path, BASE), grid=["seed=0,1"], out=tmp_path / "s")
    other = parse_config({**BASE, "seed": 7})
    _fake_run(tmp_path / "s" / plan.points[1].name, other, committed=True, summary_rounds=2)
    with pytest.raises(ConfigError, match=r"holds a run with seed = 7, but point 01-seed-1 sets 1"):
        run_sweep(plan)
    assert not (tmp_path / "s" / "sweep.json").exists()


# ----------------------------------------------------------------------------- a real sweep (Ray)


@pytest.mark.simulation
def test_every_point_runs_as_its_own_run_under_the_sweep(tiny_sweep):
    manifest = json.loads((tiny_sweep / "sweep.json").read_text())
    assert manifest["grid"] == {"client.defenses": ["none", "noise"]}
    assert [(p["name"], p["status"]) for p in manifest["points"]] == [
        ("00-defenses-none", "complete"), ("01-defenses-noise", "complete")]  # fmt: skip
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


def test_dry_run_lists_the_points_and_writes_nothing(capsys, tmp_path):
    path = write(tmp_path, {**BASE, "sweep": {"grid": {"seed": [0, 1]}}})
    out_dir = tmp_path / "s"
    code, out, _ = run_cli(capsys, "sweep", str(path), "--grid", "client.lr=0.1", "--out", str(out_dir), "--dry-run")
    assert code == 0
    assert out.splitlines() == [f"{out_dir / '00-seed-0_lr-0.1'} seed=0 client.lr=0.1",
                                f"{out_dir / '01-seed-1_lr-0.1'} seed=1 client.lr=0.1"]  # fmt: skip
    assert not out_dir.exists()
