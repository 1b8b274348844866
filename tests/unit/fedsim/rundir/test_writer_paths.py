"""Every writer of a run directory refuses a symlink that leads outside it, and writes nothing there."""

import pytest
import torch
from synthetic_runs import _synthetic_run

from fedsim.config import parse_config
from fedsim.core.atomic import OutsideDirectory
from fedsim.rundir.backlog import AttackBacklog
from fedsim.rundir.ground_truth import GroundTruthStore
from fedsim.rundir.writer import RunStore


@pytest.fixture
def run_and_outside(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    return _synthetic_run(tmp_path, "run"), outside


def test_the_summary_symlinked_outside_is_refused(run_and_outside):
    run, outside = run_and_outside
    (run / "summary.json").unlink()
    (run / "summary.json").symlink_to(outside / "summary.json")
    with pytest.raises(OutsideDirectory, match=r"summary\.json"):
        RunStore(run).write_json("summary.json", {"rounds_completed": 2})
    assert list(outside.iterdir()) == []


def test_metrics_and_checkpoints_through_symlinks_are_refused(run_and_outside):
    run, outside = run_and_outside
    (outside / "metrics.jsonl").write_text("")
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").symlink_to(outside / "metrics.jsonl")
    (run / "checkpoints").symlink_to(outside, target_is_directory=True)
    store = RunStore(run)
    with pytest.raises(OutsideDirectory):
        store.append({"round": 3, "event": "eval"})
    with pytest.raises(OutsideDirectory):
        store.save_checkpoint(3, {"w": torch.zeros(1)})
    assert [path.name for path in outside.iterdir()] == ["metrics.jsonl"]
    assert (outside / "metrics.jsonl").read_text() == ""


def test_ground_truth_through_a_symlinked_folder_is_refused_before_any_folder_is_made(run_and_outside):
    run, outside = run_and_outside
    (run / "ground_truth").symlink_to(outside, target_is_directory=True)
    with pytest.raises(OutsideDirectory):
        GroundTruthStore(run).write(1, 0, [[0]], [[0]])
    assert list(outside.iterdir()) == []


def test_a_new_run_whose_metrics_file_is_a_symlink_outside_is_refused_in_one_line(tmp_path):
    run, outside = tmp_path / "run", tmp_path / "outside.jsonl"
    run.mkdir()
    (run / "metrics.jsonl").symlink_to(outside)
    with pytest.raises(OutsideDirectory, match=r"^refusing to write '.*metrics\.jsonl': .* is a symlink to "):
        RunStore.create(parse_config({}), "cpu", run)
    assert not outside.exists()
    RunStore.create(parse_config({}), "cpu", tmp_path / "next").close()  # the refusal released nothing it held


def test_a_commit_record_symlinked_outside_is_refused_before_the_checkpoint_is_written(run_and_outside):
    run, outside = run_and_outside
    (run / "commits.jsonl").symlink_to(outside / "commits.jsonl")
    store = RunStore(run)
    with pytest.raises(OutsideDirectory, match=r"commits\.jsonl"):
        store.save_checkpoint(3, {"w": torch.zeros(1)})
    assert list(outside.iterdir()) == [] and store.last_committed_round() is None


def test_the_attack_backlog_through_a_symlinked_folder_is_refused(run_and_outside):
    run, outside = run_and_outside
    (run / "adversary").symlink_to(outside, target_is_directory=True)
    with pytest.raises(OutsideDirectory, match=r"adversary"):
        AttackBacklog(run).save(1, [])
    assert list(outside.iterdir()) == []
