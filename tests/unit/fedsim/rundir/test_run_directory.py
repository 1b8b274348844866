"""The run directory under faults: collisions, edited configs on --resume, durability of rows and checkpoints."""

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import yaml
from tiny_configs import tiny_config

import fedsim.core.atomic
from fedsim.config import ConfigError, load_config
from fedsim.rundir.writer import RunStore


def test_runs_of_one_name_started_at_once_each_get_their_own_directory(tmp_path):
    config = tiny_config(name="same", output={"dir": str(tmp_path)})
    with ThreadPoolExecutor(max_workers=8) as pool:
        stores = list(pool.map(lambda _: RunStore.create(config, "cpu"), range(8)))
    directories = {store.run_dir for store in stores}
    assert len(directories) == 8 and all(d.parent == tmp_path and d.name.startswith("same-") for d in directories)
    assert all((d / "config.yaml").is_file() and (d / "metrics.jsonl").is_file() for d in directories)
    assert not list(tmp_path.rglob("*.tmp"))  # no temporary file left behind, none shared


def test_a_named_run_directory_is_claimed_once_and_the_error_names_output_run_name(tmp_path):
    config = tiny_config(output={"dir": str(tmp_path), "run_name": "mine"})
    RunStore.create(config, "cpu")
    with pytest.raises(FileExistsError, match=r"^output.run_name: .*mine' already holds a run"):
        RunStore.create(config, "cpu")
    with pytest.raises(FileExistsError, match=r"^the run directory: "):
        RunStore.create(tiny_config(output={"dir": str(tmp_path)}), "cpu", run_dir=tmp_path / "mine")


def resumable(tmp_path, **overrides) -> RunStore:
    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "run"}, **overrides), "cpu")
    store.save_checkpoint(0, {"w": torch.zeros(1)})
    store.close()  # the run stopped: its directory is free for --resume
    return store


def edit_config(store: RunStore, change) -> None:
    path = store.run_dir / "config.yaml"
    raw = yaml.safe_load(path.read_text())
    change(raw)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def test_resuming_a_run_whose_config_was_edited_is_refused_naming_the_keys(tmp_path):
    store = resumable(tmp_path)
    edit_config(store, lambda raw: raw["client"].update(lr=0.5))
    with pytest.raises(ConfigError, match=r"config.yaml was edited since the run started \(client.lr\)"):
        RunStore.open_for_resume(store.run_dir)


def test_rounds_can_be_extended_on_resume_and_only_raised(tmp_path):
    store = resumable(tmp_path, federation={"rounds": 2})
    with pytest.raises(ConfigError, match=r"^--rounds 1: must be >= the run's federation.rounds \(2\)"):
        RunStore.open_for_resume(store.run_dir, rounds=1)
    extended, config, last = RunStore.open_for_resume(store.run_dir, rounds=5)
    extended.close()
    assert config.federation.rounds == 5 and last == 0
    assert load_config(store.run_dir / "config.yaml").federation.rounds == 5
    _, again, _ = RunStore.open_for_resume(store.run_dir)  # the extension is the run's config from now on
    assert again.federation.rounds == 5


def test_relative_paths_are_recorded_absolute_so_resume_works_from_anywhere(tmp_path, monkeypatch):
    import numpy as np

    monkeypatch.chdir(tmp_path)
    np_file = Path("data.npz")
    np.savez(np_file, x=np.zeros((8, 8, 8), dtype=np.float32), y=np.arange(8) % 2)
    config = tiny_config(data={"dataset": "npz", "path": str(np_file)}, output={"dir": "runs", "run_name": "r"})
    store = RunStore.create(config, "cpu")
    recorded = yaml.safe_load((store.run_dir / "config.yaml").read_text())
    assert recorded["data"]["path"] == str(tmp_path / "data.npz")
    assert recorded["output"]["dir"] == str(tmp_path / "runs")


def test_a_failed_append_leaves_no_torn_row_behind(tmp_path, monkeypatch):
    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "r"}), "cpu")
    store.append({"round": 0, "event": "eval", "accuracy": 0.1})
    real_write = os.write

    def disk_full(descriptor, data):
        real_write(descriptor, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fedsim.core.atomic.os, "write", disk_full)
    with pytest.raises(OSError, match="No space left"):
        store.append({"round": 1, "event": "eval", "accuracy": 0.2})
    monkeypatch.setattr(fedsim.core.atomic.os, "write", real_write)
    store.append({"round": 1, "event": "eval", "accuracy": 0.3})
    lines = store.metrics_path.read_text().splitlines()
    assert [json.loads(line)["accuracy"] for line in lines] == [0.1, 0.3]


def test_a_checkpoint_is_synced_with_its_directory_before_the_round_counts_as_committed(tmp_path, monkeypatch):
    store = RunStore.create(tiny_config(output={"dir": str(tmp_path), "run_name": "r"}), "cpu")
    synced = []
    monkeypatch.setattr(fedsim.core.atomic, "fsync_directory", lambda folder: synced.append(Path(folder)))
    store.save_checkpoint(1, {"w": torch.ones(2)})
    assert store.checkpoint_dir in synced


def test_the_layout_imports_nothing_of_the_project():
    """The clients read fedsim.rundir.layout: it must stand on nothing above the standard library."""
    import ast

    import fedsim.rundir.layout as layout

    tree = ast.parse(Path(layout.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {name for name in imported if name.split(".")[0] in ("fedsim", "clients", "strategies", "adversary")}


def test_the_layout_spells_the_names_that_run_directories_already_hold():
    """Renaming a file would orphan the run and sweep directories users have: the names are pinned here."""
    import fedsim.rundir.layout as layout

    files = (
        layout.CONFIG_FILE,
        layout.FINGERPRINT_FILE,
        layout.ENVIRONMENT_FILE,
        layout.METRICS_FILE,
        layout.COMMITS_FILE,
        layout.SUMMARY_FILE,
        layout.PARTITIONS_FILE,
        layout.CLIENT_ERROR_LOG,
    )
    assert files == (
        "config.yaml",
        "fingerprint.json",
        "environment.json",
        "metrics.jsonl",
        "commits.jsonl",
        "summary.json",
        "partitions.json",
        "client_errors.log",
    )
    assert (layout.CHECKPOINT_DIR, layout.checkpoint_file(7)) == ("checkpoints", "round_0007.pt")
    assert layout.CHECKPOINT_PATTERN.match("round_0012.pt").group(1) == "0012"
    assert layout.RECONSTRUCTIONS_DIR == "reconstructions"
    assert layout.grid_file(1, "client:0", "dlg") == "round_0001_client-0_dlg.png"
    assert layout.trajectory_file(2, "aggregate", "ig") == "round_0002_aggregate_ig_trajectory.png"
    assert (layout.GROUND_TRUTH_DIR, layout.ground_truth_round_dir(3), layout.ground_truth_file(4)) == (
        "ground_truth",
        "round_0003",
        "client_0004.json",
    )
    assert (layout.BACKLOG_DIR, layout.backlog_file(5)) == ("adversary", "observed_round_0005.pt")
    assert (layout.CLIENT_STATE_DIR, layout.PRIVACY_LEDGER_FILE) == ("clients", "privacy.json")
    assert (layout.SWEEP_CONFIG, layout.SWEEP_MANIFEST, layout.REPORT_DIR) == ("sweep.yaml", "sweep.json", "report")


# ------------------------------------------------------------------ damaged run files on --resume (issue 29, row 11)
def test_resume_with_a_truncated_last_checkpoint_names_it_and_the_round_to_fall_back_to(tmp_path):
    store = resumable(tmp_path)
    store.save_checkpoint(1, {"w": torch.ones(1)})
    damaged = store.checkpoint_path(1)
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])  # a disk that filled mid-copy
    rows_before = store.metrics_path.read_text()
    with pytest.raises(ConfigError) as refused:
        RunStore.open_for_resume(store.run_dir)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"--resume {store.run_dir}: ")
    assert f"'{damaged}' is damaged" in message and "remove it to resume from round 0" in message
    assert store.metrics_path.read_text() == rows_before  # nothing dropped before the refusal


def test_resume_with_the_only_checkpoint_truncated_says_the_run_must_start_again(tmp_path):
    store = resumable(tmp_path)
    store.checkpoint_path(0).write_bytes(b"PK\x03\x04")
    with pytest.raises(ConfigError, match=r"round_0000.pt' is damaged .*no earlier checkpoint"):
        RunStore.open_for_resume(store.run_dir)


def test_resume_with_a_checkpoint_that_is_no_state_dict_is_one_line(tmp_path):
    store = resumable(tmp_path)
    torch.save([torch.zeros(1)], store.checkpoint_path(0))
    with pytest.raises(ConfigError, match=r"round_0000.pt' is damaged \(holds a list, not a state_dict\)"):
        RunStore.open_for_resume(store.run_dir)


@pytest.mark.parametrize(
    ("garbage", "reason"),
    [
        (b"\x00\x17garbage{", "not JSON"),
        (b"\xff\xfe\x00not utf-8", "not JSON"),
        (b'{"fedsim": "0.1"', "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"config": "seed: 1"}', "no 'fedsim'"),
        (b'{"fedsim": 3, "config": "seed: 1"}', "'fedsim' is not a string"),
    ],
)
def test_resume_with_a_garbage_fingerprint_names_the_file(tmp_path, garbage, reason):
    store = resumable(tmp_path)
    (store.run_dir / "fingerprint.json").write_bytes(garbage)
    with pytest.raises(ConfigError) as refused:
        RunStore.open_for_resume(store.run_dir)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"--resume {store.run_dir}: '{store.run_dir / 'fingerprint.json'}' is damaged ({reason}")


def test_fedsim_run_resume_of_damaged_files_prints_one_line_not_a_traceback(capsys, tmp_path):
    from cli_errors import one_line_error

    store = resumable(tmp_path)
    checkpoint = store.checkpoint_path(0).read_bytes()
    store.checkpoint_path(0).write_bytes(checkpoint[:100])
    assert "round_0000.pt' is damaged" in one_line_error(capsys, "run", "--resume", str(store.run_dir))
    store.checkpoint_path(0).write_bytes(checkpoint)
    (store.run_dir / "fingerprint.json").write_text("garbage")
    assert "fingerprint.json' is damaged" in one_line_error(capsys, "run", "--resume", str(store.run_dir))


class _CreatesAFile:
    """A pickle that would create a file when loaded without weights_only."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_resume_with_a_pickle_in_the_checkpoint_refuses_it_in_one_line_and_runs_nothing(tmp_path):
    store = resumable(tmp_path)
    planted = tmp_path / "pwned"
    torch.save({"w": _CreatesAFile(planted)}, store.checkpoint_path(0))
    with pytest.raises(ConfigError) as refused:
        RunStore.open_for_resume(store.run_dir)
    message = str(refused.value)
    assert "\n" not in message and "round_0000.pt' is damaged (holds objects other than tensors (it names " in message
    assert not planted.exists()
