"""--resume trusts a run's rows and checkpoints only when they agree with its commit record (issue 29, row 6).

The runs here are played against the RunStore directly, round by round as the engine writes them: the clients'
fit rows, an attack row of the previous round that its scoring thread appends late, the round's eval row, then
the commit (its checkpoint), keeping only the last checkpoints as ``output.save_checkpoints: false`` does.
"""

import json
import logging
import shutil

import pytest
import torch

from fedsim.config import ConfigError, parse_config
from fedsim.rundir.writer import RunStore


def model_after(server_round: int) -> dict[str, torch.Tensor]:
    return {"w": torch.full((3,), float(server_round))}


def rows_of_round(server_round: int) -> list[dict]:
    fits = [{"round": server_round, "event": "fit", "client": c, "train_loss": 1 / (server_round + c)} for c in (1, 2)]
    late_attack = [{"round": server_round - 1, "event": "attack", "target": "aggregate", "psnr_mean": 12.5}]
    evaluation = [{"round": server_round, "event": "eval", "accuracy": server_round / 10}]
    return (fits + late_attack if server_round > 1 else []) + evaluation


def play(store: RunStore, rounds: range, *, keep_all: bool = False) -> None:
    for server_round in rounds:
        for row in rows_of_round(server_round):
            store.append(row)
        store.save_checkpoint(server_round, model_after(server_round))
        if not keep_all:
            store.prune_checkpoints(keep=server_round)


def stopped_run(tmp_path, name: str, rounds: int, *, keep_all: bool = False) -> RunStore:
    """A run that committed rounds 0..rounds and stopped: its directory is free for --resume."""
    store = RunStore.create(parse_config({"federation": {"rounds": 10}}), "cpu", tmp_path / name)
    play(store, range(rounds + 1), keep_all=keep_all)
    store.close()
    return store


def comparable(store: RunStore) -> list[dict]:
    """The rows, without the time they were written at, in a fixed order (late attack rows may move)."""
    rows = [{k: v for k, v in row.items() if k != "time"} for row in store.rows()]
    return sorted(rows, key=lambda row: (row["round"], row["event"], row.get("client", -1)))


def refusal(run: RunStore) -> str:
    with pytest.raises(ConfigError) as refused:
        RunStore.open_for_resume(run.run_dir)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"--resume {run.run_dir}: ")
    return message


def test_a_row_torn_inside_the_last_committed_round_is_dropped_and_the_round_runs_again(tmp_path, caplog):
    uninterrupted = stopped_run(tmp_path, "uninterrupted", 3)
    torn = stopped_run(tmp_path, "torn", 3)
    content = torn.metrics_path.read_bytes()
    torn.metrics_path.write_bytes(content[:-20])  # the machine died while round 3's eval row was written

    with caplog.at_level(logging.WARNING, logger="fedsim"):
        resumed, _, last = RunStore.open_for_resume(torn.run_dir)
    assert last == 2 and "resuming from round 2, rounds 3-3 run again" in caplog.text
    assert resumed.last_committed_round() == 2  # round 3's checkpoint goes with its rows
    assert torch.equal(resumed.load_checkpoint(2)["w"], model_after(2)["w"])
    assert max(row["round"] for row in resumed.rows() if row["event"] != "attack") == 2
    # round 3 again, as the engine plays it: round 2's attack row, kept, is not written twice
    for row in rows_of_round(3):
        if row["event"] != "attack":
            resumed.append(row)
    resumed.save_checkpoint(3, model_after(3))
    resumed.prune_checkpoints(keep=3)
    resumed.close()

    assert comparable(resumed) == comparable(uninterrupted)
    again, _, last = RunStore.open_for_resume(torn.run_dir)  # and the repaired run checks out from now on
    again.close()
    assert last == 3 and comparable(again) == comparable(uninterrupted)


def test_rows_of_an_interrupted_round_are_dropped_and_late_attack_rows_kept_byte_for_byte(tmp_path):
    store = stopped_run(tmp_path, "run", 2)
    committed = store.metrics_path.read_bytes()
    with RunStore.open_for_resume(store.run_dir)[0] as resumed:
        resumed.append({"round": 2, "event": "attack", "target": "aggregate", "psnr_mean": 11.0})  # scored late
        resumed.append({"round": 3, "event": "fit", "client": 1, "train_loss": 0.5})  # then killed in round 3
    reopened, _, last = RunStore.open_for_resume(store.run_dir)
    reopened.close()
    assert last == 2
    assert reopened.metrics_path.read_bytes().startswith(committed)
    assert [(row["round"], row["event"]) for row in reopened.rows()][-1] == (2, "attack")


def test_an_emptied_metrics_file_is_refused_in_one_line_naming_it(tmp_path):
    run = stopped_run(tmp_path, "run", 4)
    run.metrics_path.write_bytes(b"")
    message = refusal(run)
    assert f"'{run.metrics_path}' is empty, but commits.jsonl records the " in message
    assert "committed with round 4; restore it, or start the run again" in message
    assert run.last_committed_round() == 4  # nothing was dropped or rewritten


def test_edited_rows_are_refused_in_one_line_naming_the_metrics_file(tmp_path):
    run = stopped_run(tmp_path, "run", 2)
    run.metrics_path.write_text(run.metrics_path.read_text().replace('"accuracy": 0.1', '"accuracy": 0.9'))
    assert f"'{run.metrics_path}' no longer begins with the " in refusal(run)


def test_rows_cut_at_a_line_boundary_are_refused_not_resumed_without_them(tmp_path):
    run = stopped_run(tmp_path, "run", 2)
    lines = run.metrics_path.read_text().splitlines(keepends=True)
    run.metrics_path.write_text("".join(lines[2:]))  # rows of rounds 0-1 removed
    assert "rows were removed; restore it, or start the run again" in refusal(run)


def test_a_torn_row_with_no_earlier_checkpoint_to_go_back_to_is_refused(tmp_path):
    run = stopped_run(tmp_path, "run", 0)
    run.metrics_path.write_bytes(run.metrics_path.read_bytes()[:-5])
    assert f"'{run.metrics_path}' ends in a row torn among round 0's committed rows" in refusal(run)


def test_a_checkpoint_swapped_for_an_older_one_is_refused_in_one_line_naming_it(tmp_path):
    run = stopped_run(tmp_path, "run", 5, keep_all=True)
    shutil.copyfile(run.checkpoint_path(2), run.checkpoint_path(5))
    message = refusal(run)
    assert f"checkpoint '{run.checkpoint_path(5)}' does not match the sha256 recorded" in message
    assert "when round 5 was committed (replaced or altered); restore it, or remove it to resume from round 4" in (
        message
    )


def test_a_checkpoint_no_round_committed_is_refused(tmp_path):
    run = stopped_run(tmp_path, "run", 2)
    shutil.copyfile(run.checkpoint_path(2), run.checkpoint_path(7))
    assert f"checkpoint '{run.checkpoint_path(7)}' has no line in " in refusal(run)


def test_a_commit_whose_checkpoint_never_appeared_is_ignored(tmp_path, monkeypatch):
    store = RunStore.create(parse_config({}), "cpu", tmp_path / "run")
    play(store, range(3))

    def killed(*args, **kwargs):
        raise RuntimeError("killed between the commit line and the rename")

    monkeypatch.setattr("fedsim.core.atomic.os.replace", killed)
    with pytest.raises(RuntimeError, match="killed"):
        store.save_checkpoint(3, model_after(3))
    store.close()
    assert '"round": 3' in store.commits_path.read_text()  # its line was written, its checkpoint never renamed
    with store.commits_path.open("a") as record:
        record.write('{"round": 4, "checkpoint_sha')  # and a line torn by a second kill
    monkeypatch.undo()
    resumed, _, last = RunStore.open_for_resume(store.run_dir)
    resumed.close()
    assert last == 2
    assert resumed.commits_path.read_text().count("\n") == 3  # the lines of rounds 0-2, and no torn one


def written_before_the_record(run: RunStore) -> None:
    """Make ``run`` look as fedsim wrote runs before it kept commits.jsonl: no record, no word of it in the
    fingerprint."""
    run.commits_path.unlink()
    fingerprint_path = run.run_dir / "fingerprint.json"
    fingerprint = json.loads(fingerprint_path.read_text())
    del fingerprint["integrity_record"]
    fingerprint_path.write_text(json.dumps(fingerprint))


def test_a_run_without_commit_records_still_resumes_with_a_warning(tmp_path, caplog):
    run = stopped_run(tmp_path, "run", 2)
    written_before_the_record(run)
    with caplog.at_level(logging.WARNING, logger="fedsim"):
        resumed, _, last = RunStore.open_for_resume(run.run_dir)
    resumed.close()
    assert last == 2
    assert "no commits.jsonl (the run predates it): its rows and checkpoints cannot be verified" in caplog.text


def test_fedsim_run_resume_of_a_swapped_checkpoint_prints_one_line_and_exits_2(capsys, tmp_path):
    from cli_errors import one_line_error

    run = stopped_run(tmp_path, "run", 2, keep_all=True)
    shutil.copyfile(run.checkpoint_path(0), run.checkpoint_path(2))
    line = one_line_error(capsys, "run", "--resume", str(run.run_dir))
    assert f"checkpoint '{run.checkpoint_path(2)}' does not match the sha256 recorded" in line
