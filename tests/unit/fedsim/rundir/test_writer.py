"""The run store: durable rows, atomic checkpoints, and what --resume keeps."""

import json
import threading

import pytest
import torch

from fedsim.config import parse_config
from fedsim.core.atomic import save_torch_atomic, write_atomic, write_json_atomic
from fedsim.rundir.ground_truth import GroundTruthStore
from fedsim.rundir.writer import RunStore


@pytest.fixture
def store(tmp_path):
    """A run that stopped: its directory is free for a resume (or a refused second run)."""
    store = RunStore.create(parse_config({}), "cpu", tmp_path / "run")
    store.close()
    return store


def test_a_new_run_records_config_and_environment(store):
    assert (store.run_dir / "config.yaml").is_file()
    environment = json.loads((store.run_dir / "environment.json").read_text())
    assert environment["device"] == "cpu" and environment["versions"]["torch"]


def test_an_existing_run_is_not_overwritten(store):
    with pytest.raises(FileExistsError, match="--resume"):
        RunStore.create(parse_config({}), "cpu", store.run_dir)


def test_rows_need_round_and_event(store):
    with pytest.raises(ValueError):
        store.append({"event": "eval"})


def test_a_line_torn_by_a_kill_is_ignored(store):
    store.append({"round": 1, "event": "eval", "accuracy": 0.5})
    with open(store.metrics_path, "a") as handle:
        handle.write('{"round": 2, "event": "ev')
    assert [row["round"] for row in store.rows()] == [1]


def test_resume_keeps_committed_rounds_and_drops_the_interrupted_one(store):
    for server_round in (0, 1, 2):
        store.append({"round": server_round, "event": "eval", "accuracy": server_round / 10})
    store.save_checkpoint(0, {"w": torch.zeros(2)})
    store.save_checkpoint(1, {"w": torch.ones(2)})  # round 2 wrote its rows, then was killed
    reopened, config, last = RunStore.open_for_resume(store.run_dir)
    assert last == 1 and config.name == "fedsim"
    assert [row["round"] for row in reopened.rows()] == [0, 1]
    assert torch.equal(reopened.load_checkpoint(1)["w"], torch.ones(2))


def test_resume_of_a_run_that_never_started_is_a_clear_error(store):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        RunStore.open_for_resume(store.run_dir)


def test_resume_of_a_folder_that_is_no_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a fedsim run directory"):
        RunStore.open_for_resume(tmp_path)


def test_pruning_keeps_the_latest_checkpoint_and_the_one_before(store):
    for server_round in range(4):
        store.save_checkpoint(server_round, {"w": torch.zeros(1)})
    store.prune_checkpoints(keep=3)
    assert store.last_committed_round() == 3
    assert sorted(p.name for p in store.checkpoint_dir.iterdir()) == ["round_0002.pt", "round_0003.pt"]


def test_ground_truth_round_trip(tmp_path):
    truth = GroundTruthStore(tmp_path)
    truth.write(3, 1, batches=[[5, 2], [9]], labels=[[0, 1], [1]])
    assert truth.read(3, 1)["batches"] == [[5, 2], [9]]
    assert truth.clients(3) == [1] and truth.clients(4) == []


def test_an_atomic_write_that_fails_leaves_the_previous_file_and_no_temporary(tmp_path):
    target = tmp_path / "ledger.json"
    write_json_atomic(target, {"rounds": [1]})

    def killed_half_way(handle):
        handle.write(b'{"rounds": [1, 2')
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        write_atomic(target, killed_half_way)
    assert json.loads(target.read_text()) == {"rounds": [1]}
    assert list(tmp_path.iterdir()) == [target]


def test_concurrent_writers_of_one_file_never_share_a_temporary_file(tmp_path):
    target = tmp_path / "observed_round_0001.pt"
    payloads = [{"writer": torch.full((256,), float(i))} for i in range(4)]
    errors: list[BaseException] = []

    def write_many(payload):
        try:
            for _ in range(25):
                save_torch_atomic(target, payload)
        except BaseException as error:  # a shared temporary file: renamed away under another writer
            errors.append(error)

    threads = [threading.Thread(target=write_many, args=(payload,)) for payload in payloads]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    written = torch.load(target, weights_only=True)["writer"]
    assert any(torch.equal(written, payload["writer"]) for payload in payloads)
    assert list(tmp_path.iterdir()) == [target]
