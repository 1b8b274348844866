"""`fedsim sweep`: grid expansion and validation up front, resuming, and a real sweep of two tiny runs."""

import logging

import pytest
from sweep_configs import BASE, run_cli, write

from fedsim.config import ConfigError, load_config
from fedsim.sweep import plan_sweep


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
    with pytest.raises(
        ConfigError, match=message.replace("[", r"\[").replace("]", r"\]").replace("{", r"\{").replace("}", r"\}")
    ):
        plan_sweep(write(tmp_path, {**BASE, "sweep": sweep}), out=tmp_path / "s")


def test_the_sweep_owns_where_runs_go(tmp_path):
    with pytest.raises(ConfigError, match="not sweepable"):
        plan_sweep(write(tmp_path, BASE), grid=["output.dir=a,b"], out=tmp_path / "s")


def test_run_and_validate_accept_a_sweep_config(capsys, tmp_path, caplog):
    path = write(tmp_path, {**BASE, "sweep": {"grid": {"seed": [0, 1, 2]}}})
    with caplog.at_level(logging.WARNING, logger="fedsim"):
        assert load_config(path).seed == 0  # `fedsim run` runs the base point
    assert "fedsim sweep" in caplog.text
    code, out, _ = run_cli(capsys, "validate", str(path))
    assert code == 0 and "valid sweep of 3 point(s) over seed" in out


def test_dry_run_lists_the_points_and_writes_nothing(capsys, tmp_path):
    path = write(tmp_path, {**BASE, "sweep": {"grid": {"seed": [0, 1]}}})
    out_dir = tmp_path / "s"
    code, out, _ = run_cli(capsys, "sweep", str(path), "--grid", "client.lr=0.1", "--out", str(out_dir), "--dry-run")
    assert code == 0
    assert out.splitlines() == [
        f"{out_dir / '00-seed-0_lr-0.1'} seed=0 client.lr=0.1",
        f"{out_dir / '01-seed-1_lr-0.1'} seed=1 client.lr=0.1",
    ]
    assert not out_dir.exists()


def test_a_sweep_directory_is_not_replanned_without_points_it_already_ran(tmp_path):
    """Another grid on a sweep directory would rewrite its manifest without the points it already ran (their runs
    would drop out of its tables): refused before anything is written, naming how to continue it."""
    from fedsim.sweep import run_sweep
    from fedsim.sweep.manifest import Manifest, write_sweep_config

    path = write(tmp_path, {**BASE, "sweep": {"grid": {"seed": [0, 1, 2]}}})
    earlier = plan_sweep(path, out=tmp_path / "s")
    earlier.sweep_dir.mkdir()
    write_sweep_config(earlier.sweep_dir, earlier.base, earlier.axes)
    Manifest.for_points(earlier.sweep_dir, earlier.axes, earlier.points).save()
    (earlier.sweep_dir / earlier.points[2].name).mkdir()  # the run of its third point
    manifest = (earlier.sweep_dir / "sweep.json").read_text()

    narrower = plan_sweep(path, grid=["seed=0,1"], out=tmp_path / "s")
    with pytest.raises(ConfigError, match=r"02-seed-2\): continue it with `fedsim sweep --resume"):
        run_sweep(narrower)
    assert (earlier.sweep_dir / "sweep.json").read_text() == manifest
