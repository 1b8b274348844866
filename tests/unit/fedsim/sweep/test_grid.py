"""The sweep grid: values, axes from the config and the command line, list indexes."""

from pathlib import Path

import pytest
from sweep_configs import BASE, run_cli, write

from fedsim.config import ConfigError
from fedsim.sweep import plan_sweep
from fedsim.sweep.grid import parse_grid_arg, split_top_level


def test_grid_values_split_on_top_level_commas_only():
    assert split_top_level("[],[{name: prune, ratio: 0.9}],'a,b'") == ["[]", "[{name: prune, ratio: 0.9}]", "'a,b'"]
    axis = parse_grid_arg("client.defenses=[],[{name: prune, ratio: 0.9}]")
    assert axis.key == "client.defenses"
    assert axis.values == (("none", []), ("name-prune-ratio-0.9", [{"name": "prune", "ratio": 0.9}]))


def test_the_grid_is_the_cartesian_product_of_the_config_section_and_the_command_line(tmp_path):
    raw = {**BASE, "sweep": {"grid": {"client.defenses": {"none": [], "prune": [{"name": "prune", "ratio": 0.5}]}}}}
    plan = plan_sweep(write(tmp_path, raw), grid=["client.lr=0.01,0.1"], out=tmp_path / "s")
    assert [p.name for p in plan.points] == [
        "00-defenses-none_lr-0.01",
        "01-defenses-none_lr-0.1",
        "02-defenses-prune_lr-0.01",
        "03-defenses-prune_lr-0.1",
    ]
    point = plan.points[3]
    assert point.overrides == {"client.defenses": [{"name": "prune", "ratio": 0.5}], "client.lr": 0.1}
    assert point.config.client.lr == 0.1 and point.config.client.defenses[0].ratio == 0.5
    assert point.config.output.dir == tmp_path / "s" and point.config.output.run_name == point.name
    assert not (tmp_path / "s").exists()  # planning writes nothing


def test_list_indexes_reach_into_the_base_config(tmp_path):
    plan = plan_sweep(
        write(tmp_path, BASE),
        overrides=["client.defenses=[{name: noise, sigma: 0.5}]"],
        grid=["client.defenses.0.sigma=1e-3,1e-2"],
        out=tmp_path / "s",
    )
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
    plan = plan_sweep(
        write(tmp_path, raw),
        overrides=["client.defenses=[{name: noise, sigma: 0.5}]"],
        grid=["client.defenses.0.sigma=0.1,0.2"],
        out=tmp_path / "s",
    )
    assert [axis.key for axis in plan.axes] == ["seed", "client.defenses.0.sigma"]
    assert len(plan.points) == 4


def test_a_bad_key_in_grid_fails_before_anything_runs(capsys, tmp_path):
    code, _, err = run_cli(
        capsys, "sweep", str(write(tmp_path, BASE)), "--grid", "client.lrr=0.1,0.2", "--out", str(tmp_path / "s")
    )
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "--grid client.lrr=0.1" in err and "did you mean 'lr'" in err and "allowed here:" in err
    assert not (tmp_path / "s").exists()


def test_a_bad_value_names_the_key_the_value_and_what_is_allowed(capsys, tmp_path):
    code, _, err = run_cli(
        capsys,
        "sweep",
        str(write(tmp_path, BASE)),
        "--grid",
        "client.lr=0.1,-1",
        "--grid",
        "seed=0,1",
        "--out",
        str(tmp_path / "s"),
    )
    assert (
        code == 2
        and err.strip() == "fedsim: error: --grid client.lr=-1: client.lr = -1: Input should be greater than 0"
    )
    assert not (tmp_path / "s").exists()
