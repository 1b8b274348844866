"""`fedsim report` on a run directory that cannot be written is one line saying so and what to do, never an
OSError traceback (issue 41, row 8: `mount --bind -o ro RUN RO; fedsim report RO`)."""

import errno
import os
import pathlib
import shutil
import subprocess

import pytest
from cli_errors import one_line_error
from synthetic_runs import _synthetic_run


def _expected(run_dir, reason: str) -> str:
    return (
        f"fedsim: error: report: cannot write '{run_dir / 'report'}' ({reason}); copy {run_dir} to a folder you can "
        "write and run `fedsim report` on the copy"
    )


def test_a_run_on_a_read_only_file_system_is_reported_in_one_line(tmp_path, capsys, monkeypatch):
    run_dir = _synthetic_run(tmp_path, "run")
    real_mkdir = pathlib.Path.mkdir

    def read_only(path, *args, **kwargs):  # what a read-only mount answers
        if path.name == "report":
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", read_only)
    assert one_line_error(capsys, "report", str(run_dir)) == _expected(run_dir, os.strerror(errno.EROFS))


def test_a_read_only_report_folder_that_exists_is_refused_before_anything_is_written(tmp_path, capsys, monkeypatch):
    import tempfile

    run_dir = _synthetic_run(tmp_path, "run")
    (run_dir / "report").mkdir()

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "TemporaryFile", read_only)
    assert one_line_error(capsys, "report", str(run_dir)) == _expected(run_dir, os.strerror(errno.EROFS))
    assert list((run_dir / "report").iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits")
def test_a_run_directory_the_user_may_not_write_is_reported_in_one_line(tmp_path, capsys):
    run_dir = _synthetic_run(tmp_path, "run")
    run_dir.chmod(0o555)
    try:
        assert one_line_error(capsys, "report", str(run_dir)) == _expected(run_dir, os.strerror(errno.EACCES))
    finally:
        run_dir.chmod(0o755)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="a bind mount needs root")
def test_a_read_only_bind_mount_of_a_run_is_reported_in_one_line(tmp_path, capsys):
    run_dir = _synthetic_run(tmp_path, "run")
    read_only = tmp_path / "ro"
    read_only.mkdir()
    if subprocess.run(["mount", "--bind", str(run_dir), str(read_only)]).returncode != 0:
        pytest.skip("this machine refuses bind mounts")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(read_only)], check=True)
        assert one_line_error(capsys, "report", str(read_only)) == _expected(read_only, os.strerror(errno.EROFS))
    finally:
        subprocess.run(["umount", "--lazy", str(read_only)], check=True)
