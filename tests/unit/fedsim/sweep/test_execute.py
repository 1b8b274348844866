"""Executing a sweep: CPUs split between parallel runs, and what each point's run directory needs."""

from pathlib import Path

import pytest
from sweep_configs import BASE, write

from fedsim.config import ConfigError, parse_config
from fedsim.rundir.writer import RunStore
from fedsim.sweep import plan_sweep, run_sweep
from fedsim.sweep.execute import PointJob, execute_point, point_action, ray_share


def test_parallel_runs_split_the_cpus_and_refuse_what_does_not_fit(tmp_path):
    plan = plan_sweep(write(tmp_path, BASE), grid=["seed=0,1"], out=tmp_path / "s")
    assert ray_share(plan.points, parallel=1, cpus=None) is None  # one run at a time: the whole machine
    assert ray_share(plan.points, parallel=2, cpus=4) == {"num_cpus": 2}
    with pytest.raises(ConfigError, match="--parallel 4: each run gets 1 of 4 CPU"):
        heavy = plan_sweep(
            write(tmp_path, BASE),
            overrides=["federation.client_resources.cpus=2"],
            grid=["seed=0,1"],
            out=tmp_path / "s",
        )
        ray_share(heavy.points, parallel=4, cpus=4)
    with pytest.raises(ConfigError, match="allowed: --parallel <= 2"):
        ray_share(plan.points, parallel=3, cpus=2)


def _fake_run(run_dir: Path, config, *, committed: bool, summary_rounds: int | None) -> None:
    store = RunStore.create(config, "cpu", run_dir)
    if committed:
        store.save_checkpoint(0, {})
    if summary_rounds is not None:
        store.write_json("summary.json", {"rounds_completed": summary_rounds})


def test_each_point_gets_what_its_run_directory_needs(tmp_path):
    plan = plan_sweep(write(tmp_path, BASE), grid=["seed=0,1,2,3,4"], out=tmp_path / "s")
    _new, done, half, unstarted, short = plan.points
    _fake_run(tmp_path / "s" / done.name, done.config, committed=True, summary_rounds=2)
    _fake_run(tmp_path / "s" / half.name, half.config, committed=True, summary_rounds=None)
    _fake_run(tmp_path / "s" / unstarted.name, unstarted.config, committed=False, summary_rounds=None)
    _fake_run(tmp_path / "s" / short.name, short.config, committed=True, summary_rounds=1)  # stopped early
    actions = [point_action(p, tmp_path / "s" / p.name) for p in plan.points]
    assert actions == ["run", "skip", "resume", "restart", "resume"]


def test_a_run_that_stopped_at_its_plateau_is_complete_and_one_stopped_short_of_it_resumes(tmp_path):
    plan = plan_sweep(
        write(tmp_path, BASE),
        overrides=["federation.rounds=10", "federation.plateau={patience: 2, min_delta: 0.0}"],
        grid=["seed=0,1"],
        out=tmp_path / "s",
    )
    at_plateau, short = plan.points
    for point, plateau in ((at_plateau, {"round": 4}), (short, None)):
        run_dir = tmp_path / "s" / point.name
        store = RunStore.create(point.config, "cpu", run_dir)
        store.save_checkpoint(0, {})
        store.write_json("summary.json", {"rounds_completed": 4, "plateau": plateau})
    actions = [point_action(p, tmp_path / "s" / p.name) for p in plan.points]
    assert actions == ["skip", "resume"]


def test_a_run_directory_of_another_config_is_refused_before_anything_runs(tmp_path):
    plan = plan_sweep(write(tmp_path, BASE), grid=["seed=0,1"], out=tmp_path / "s")
    other = parse_config({**BASE, "seed": 7})
    _fake_run(tmp_path / "s" / plan.points[1].name, other, committed=True, summary_rounds=2)
    with pytest.raises(ConfigError, match=r"holds a run with seed = 7, but point 01-seed-1 sets 1"):
        run_sweep(plan)
    assert not (tmp_path / "s" / "sweep.json").exists()


def test_a_run_that_recorded_its_adaptive_attack_adapted_is_the_same_point_and_a_changed_option_is_not(tmp_path):
    dropout = [{"name": "gradient_dropout", "p": 0.6, "sigma": 0.005}]
    raw = {**BASE, "client": {**BASE.get("client", {}), "defenses": dropout}}
    raw["adversary"] = {"attacks": [{"name": "ig", "iterations": 5}, {"name": "ig-dropout", "iterations": 5}]}
    plan = plan_sweep(write(tmp_path, raw), grid=["seed=0,1"], out=tmp_path / "s")
    for point, iterations in zip(plan.points, (5, 6), strict=True):
        # what the run records: ig-dropout with what it took from the defense filled in
        attacks = point.config.adversary.attacks
        adapted = attacks[1].model_copy(
            update={"observed_scale": 0.6, "match_entries": "above-threshold", "match_threshold": 0.02}
        )
        recorded = [attacks[0], adapted.model_copy(update={"iterations": iterations})]
        config = point.config.model_copy(
            update={"adversary": point.config.adversary.model_copy(update={"attacks": recorded})}
        )
        _fake_run(tmp_path / "s" / point.name, config, committed=True, summary_rounds=2)
    assert point_action(plan.points[0], tmp_path / "s" / plan.points[0].name) == "skip"
    with pytest.raises(ConfigError, match=r"holds a run with adversary.attacks = .*'iterations': 6"):
        point_action(plan.points[1], tmp_path / "s" / plan.points[1].name)


def test_a_point_directory_symlinked_outside_the_sweep_is_refused_before_anything_runs(tmp_path):
    plan = plan_sweep(write(tmp_path, BASE), grid=["seed=0,1"], out=tmp_path / "s")
    elsewhere = tmp_path / "elsewhere"
    _fake_run(elsewhere, plan.points[1].config, committed=True, summary_rounds=None)
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / plan.points[1].name).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(ConfigError, match=rf"'{tmp_path / 's' / plan.points[1].name}' is a symlink to '{elsewhere}'"):
        run_sweep(plan)
    assert not (tmp_path / "s" / "sweep.json").exists()
    assert RunStore(elsewhere).rows() == []  # the outside run was neither resumed nor written to


def test_a_point_to_restart_that_another_process_still_writes_is_left_alone(tmp_path):
    plan = plan_sweep(write(tmp_path, BASE), grid=["seed=0"], out=tmp_path / "s")
    point = plan.points[0]
    run_dir = tmp_path / "s" / point.name
    writer = RunStore.create(point.config, "cpu", run_dir)  # round 0 not committed yet, and still being written
    assert point_action(point, run_dir) == "restart"
    outcome = execute_point(PointJob(point.name, point.config, run_dir, "restart", None, quiet=True))
    assert outcome.status == "busy" and f"sweep point {point.name}: '{run_dir}' is being written by" in outcome.error
    assert (run_dir / "config.yaml").exists()
    writer.close()


def test_a_points_time_is_split_into_its_rounds_the_attacks_after_them_and_the_overhead(tmp_path):
    import json

    from fedsim.sweep.execute import point_time

    rows = [
        {"event": "eval", "round": 1, "seconds": 3.0, "time": 90.0},  # an earlier session's: not this point's
        {"event": "eval", "round": 2, "seconds": 2.0, "time": 110.0},
        {"event": "attack", "round": 2, "time": 111.0},
        {"event": "eval", "round": 3, "seconds": 2.5, "time": 113.0},
        {"event": "attack", "round": 3, "time": 116.5},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    split = point_time(tmp_path, wall=20.0, since=100.0, started=("Ray",))
    assert (split.rounds, split.attack_tail, split.overhead) == (4.5, 3.5, 12.0)
    assert split.text() == "rounds 4.5s, attacks after the last round 3.5s, overhead 12.0s; started Ray"
