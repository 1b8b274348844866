"""A full disk while a checkpoint (or any torch file of a run) is written is an OSError naming the file, which the
command line says in one line: never torch's `RuntimeError: [enforce fail at inline_container.cc]` (issue 41,
row 6). The round is not committed, and nothing half-written is left."""

import errno
import logging
import shutil
import subprocess

import pytest
import torch
from full_disk import fill_the_disk_for_atomic_writes
from tiny_configs import tiny_config

from fedsim.rundir.backlog import AttackBacklog
from fedsim.rundir.writer import RunStore
from fedsim.sweep.execute import PointJob, execute_point


@pytest.fixture
def store(tmp_path):
    store = RunStore.create(tiny_config(), "cpu", tmp_path / "run")
    store.save_checkpoint(0, {"w": torch.zeros(4)})
    yield store
    store.close()


def test_a_full_disk_while_a_checkpoint_is_written_names_it_and_commits_nothing(store, monkeypatch):
    commits_before = store.commits_path.read_bytes()
    fill_the_disk_for_atomic_writes(monkeypatch)
    with pytest.raises(OSError) as full:
        store.save_checkpoint(1, {"w": torch.ones(4)})
    assert full.value.errno == errno.ENOSPC and full.value.filename == str(store.checkpoint_path(1))
    assert store.last_committed_round() == 0 and store.commits_path.read_bytes() == commits_before
    assert not list(store.checkpoint_dir.glob(".*.tmp"))


def test_a_full_disk_while_the_attack_backlog_is_saved_names_the_file(store, monkeypatch):
    fill_the_disk_for_atomic_writes(monkeypatch)
    with pytest.raises(OSError) as full:
        AttackBacklog(store.run_dir).save(1, [])
    assert full.value.errno == errno.ENOSPC and "observed_round_0001.pt" in full.value.filename


def _can_mount() -> bool:
    return (
        shutil.which("mount") is not None and subprocess.run(["id", "-u"], capture_output=True).stdout.strip() == b"0"
    )


@pytest.mark.skipif(not _can_mount(), reason="a real small tmpfs needs root and mount")
def test_a_real_full_tmpfs_gives_an_oserror_not_torchs_runtime_error(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)]).returncode != 0:
        pytest.skip("this machine refuses to mount a tmpfs")
    store = None
    try:
        store = RunStore.create(tiny_config(), "cpu", disk / "run")
        with pytest.raises(OSError) as full:
            for server_round in range(100):  # 64 KiB each: the disk fills within a few rounds
                store.save_checkpoint(server_round, {"w": torch.zeros(16_384)})
        assert full.value.errno == errno.ENOSPC and str(store.checkpoint_dir) in full.value.filename
    finally:
        if store is not None:
            store.close()  # its run.lock is open: the mount stays busy until it is closed
        subprocess.run(["umount", "--lazy", str(disk)], check=True)


def test_a_full_disk_in_a_sweep_point_is_one_line_with_the_sweep_resume_and_no_traceback(tmp_path, monkeypatch, caplog):
    import tempfile

    import fedsim.engine.run as runner

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    sweep_dir = tmp_path / "s"
    checkpoint = sweep_dir / "p" / "checkpoints" / "round_0001.pt"

    def disk_fills(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(checkpoint))

    monkeypatch.setattr(runner, "run_experiment", disk_fills)
    with caplog.at_level(logging.INFO, logger="fedsim"):
        outcome = execute_point(PointJob("p", tiny_config(), sweep_dir / "p", "resume", None, True))
    assert outcome.status == "failed"
    assert outcome.error.startswith(
        f"no space left on device writing {checkpoint}; free space and resume with `fedsim sweep --resume {sweep_dir}`"
    )
    assert "Traceback" not in caplog.text and all(record.exc_info is None for record in caplog.records)
