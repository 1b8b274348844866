"""The integrity record cannot be switched off by deleting it, nor the config check by deleting the fingerprint
(issue 41, rows 2 and 14)."""

import json
import logging

import pytest
import yaml

from fedsim.rundir.writer import RunStore
from tests.unit.fedsim.rundir.test_resume_checks import refusal, stopped_run, written_before_the_record


def edit_an_accuracy(run: RunStore) -> None:
    """Round 1's accuracy raised, as the audit did (0.5611 -> 0.9611)."""
    content = run.metrics_path.read_text()
    assert '"accuracy": 0.1,' in content
    run.metrics_path.write_text(content.replace('"accuracy": 0.1,', '"accuracy": 0.9,', 1))


@pytest.mark.parametrize("how", ["removed", "emptied"])
def test_a_run_with_an_edited_row_and_its_commit_record_deleted_is_refused_in_one_line(tmp_path, how):
    run = stopped_run(tmp_path, "run", 2)
    edit_an_accuracy(run)
    if how == "removed":
        run.commits_path.unlink()
    else:
        run.commits_path.write_bytes(b"")
    state = "is missing" if how == "removed" else "holds no commit"
    assert refusal(run).endswith(
        f"'{run.commits_path}' {state}, but the run's fingerprint.json records that the run keeps it: its rows and "
        "checkpoints cannot be verified without it; restore it from a copy of the run, or start the run again"
    )
    assert '"accuracy": 0.9,' in run.metrics_path.read_text()  # refused before anything was rewritten


def test_a_record_cut_to_its_first_lines_still_refuses_a_checkpoint_it_does_not_commit(tmp_path):
    run = stopped_run(tmp_path, "run", 2)
    lines = run.commits_path.read_text().splitlines(keepends=True)
    run.commits_path.write_text(lines[-1].replace('"round": 2', '"round": 7'))  # no line of round 2 left
    assert "this run never committed round 2" in refusal(run)


def test_the_fingerprint_of_a_new_run_says_it_keeps_the_record_and_an_extension_keeps_saying_so(tmp_path):
    run = stopped_run(tmp_path, "run", 2)
    fingerprint = run.run_dir / "fingerprint.json"
    assert json.loads(fingerprint.read_text())["integrity_record"] == "commits.jsonl"
    resumed, config, _ = RunStore.open_for_resume(run.run_dir, rounds=12)
    resumed.close()
    assert config.federation.rounds == 12
    assert json.loads(fingerprint.read_text())["integrity_record"] == "commits.jsonl"


def edit_the_learning_rate(run: RunStore) -> None:
    path = run.run_dir / "config.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["client"]["lr"] = 0.5
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def test_an_edited_config_with_its_fingerprint_removed_is_not_resumed(tmp_path):
    run = stopped_run(tmp_path, "run", 2)
    (run.run_dir / "fingerprint.json").unlink()
    edit_the_learning_rate(run)
    message = refusal(run)
    assert f"'{run.run_dir / 'fingerprint.json'}' is missing, but the run keeps commits.jsonl" in message
    assert "restore it from a copy of the run" in message


def test_a_run_older_than_both_records_resumes_saying_that_its_config_cannot_be_checked(tmp_path, caplog):
    run = stopped_run(tmp_path, "run", 2)
    written_before_the_record(run)
    (run.run_dir / "fingerprint.json").unlink()
    with caplog.at_level(logging.WARNING, logger="fedsim"):
        resumed, _, last = RunStore.open_for_resume(run.run_dir)
    resumed.close()
    assert last == 2
    assert "no fingerprint.json (the run predates it): config.yaml cannot be checked" in caplog.text
    assert "no commits.jsonl (the run predates it)" in caplog.text


def test_fedsim_run_resume_without_the_record_prints_one_line_and_exits_2(capsys, tmp_path):
    from cli_errors import one_line_error

    run = stopped_run(tmp_path, "run", 2)
    edit_an_accuracy(run)
    run.commits_path.unlink()
    line = one_line_error(capsys, "run", "--resume", str(run.run_dir))
    assert line.startswith(f"fedsim: error: --resume {run.run_dir}: '{run.commits_path}' is missing")


def test_a_kill_between_a_commit_line_and_its_rename_resumes_from_the_round_before_without_its_temporary(tmp_path):
    from fedsim.rundir.commits import Commit, append_commit

    run = stopped_run(tmp_path, "run", 2)
    # what kill -9 leaves there: round 3's line is durable, its checkpoint still a temporary file
    append_commit(run.commits_path, Commit(3, "0" * 64, run.metrics_path.stat().st_size, "0" * 64), root=run.run_dir)
    temporary = run.checkpoint_dir / ".round_0003.pt.k1ll3d.tmp"
    temporary.write_bytes(b"half a checkpoint")
    resumed, _, last = RunStore.open_for_resume(run.run_dir)
    resumed.close()
    assert last == 2 and not temporary.exists()
