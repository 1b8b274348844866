"""Reading a sweep back: only run directories inside the sweep count as its points."""

import json

import pytest
from synthetic_runs import _synthetic_run

import fedsim
from fedsim.cli import main
from fedsim.core.errors import ConfigError


def _sweep(tmp_path, run_dirs: dict[str, str]):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    points = [
        {"name": name, "run_dir": run_dir, "overrides": {}, "labels": {}, "status": "complete"}
        for name, run_dir in run_dirs.items()
    ]
    (sweep / "sweep.json").write_text(json.dumps({"config": "sweep.yaml", "grid": {}, "points": points}))
    return sweep


def test_a_sweep_reads_its_own_points(tmp_path):
    sweep = _sweep(tmp_path, {"a": "a"})
    _synthetic_run(sweep, "a")
    assert list(fedsim.load_sweep(sweep).runs) == ["a"]


@pytest.mark.parametrize("how", ["relative", "absolute", "symlink"])
def test_a_manifest_pointing_at_a_run_outside_the_sweep_is_refused_naming_the_point(tmp_path, capsys, how):
    elsewhere = _synthetic_run(tmp_path / "elsewhere", "foreign")
    if how == "symlink":
        sweep = _sweep(tmp_path, {"a": "a"})
        (sweep / "a").symlink_to(elsewhere, target_is_directory=True)
    else:
        sweep = _sweep(tmp_path, {"a": "../elsewhere/foreign" if how == "relative" else str(elsewhere)})
    with pytest.raises(ConfigError, match="point 'a'") as refused:
        fedsim.load_sweep(sweep)
    assert str(elsewhere) in str(refused.value)
    code = main(["report", str(sweep)])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "point 'a'" in err
    assert not (sweep / "report").exists() and not (elsewhere / "report").exists()


def test_an_old_runs_attack_rows_load_with_an_unknown_verdict(tmp_path):
    from old_runs import write_old_run

    run = fedsim.load_run(write_old_run(tmp_path / "old"))
    verdicts = run.verdicts()
    assert verdicts[["round", "target", "attack", "verdict"]].values.tolist() == [[1, "aggregate", "dlg", "unknown"]]
    assert verdicts[["ssim_mean", "floor_ssim", "floor_source"]].isna().all().all()  # never recorded: no number
