"""The audited app runs in its own working directory inside the run directory: a file it writes by a relative
name lands there, never in the caller's working directory (Flower's simulation: a stand-in that writes a file)."""

from __future__ import annotations

import os
from pathlib import Path

from flower_apps import QUICKSTART_APP, QUICKSTART_AUDIT, write_image_parquet

import fedsim.engine.app_audit.runner as runner
from fedsim.engine.app_audit.workdir import app_working_directory, relative_paths


def test_a_file_the_app_writes_lands_in_the_run_directory_and_the_callers_directory_is_back(tmp_path, monkeypatch):
    def app_saves_its_final_model(*args, **kwargs):  # what the quickstart's ServerApp does at its end
        Path("final_model.pt").write_text("the app's model")

    monkeypatch.setattr(runner, "run_app", app_saves_its_final_model)
    caller = tmp_path / "caller"
    caller.mkdir()
    monkeypatch.chdir(caller)
    data = write_image_parquet(tmp_path / "images.parquet", 10)
    settings = ["app.num_supernodes=2", "adversary.attacks=[]", "output.dir=runs"]  # relative to the caller
    run_config = f'num-server-rounds=1 data-files="{data}"'
    run_dir = runner.audit_app(QUICKSTART_APP, QUICKSTART_AUDIT, settings, run_config)
    assert run_dir.parent == caller / "runs"
    assert (run_dir / "app" / "final_model.pt").read_text() == "the app's model"
    assert list(caller.iterdir()) == [caller / "runs"] and Path.cwd() == caller


def test_an_app_that_writes_nothing_leaves_no_empty_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with app_working_directory(tmp_path) as folder:
        assert Path.cwd() == folder == tmp_path / "app"
    assert os.listdir(tmp_path) == [] and Path.cwd() == tmp_path


def test_a_run_config_path_relative_to_the_caller_is_said_with_its_absolute_form(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cifar10.parquet").write_text("")
    run_config = {"data-files": "cifar10.parquet", "dataset": "uoft-cs/cifar10", "final-model": "final_model.pt"}
    assert relative_paths(run_config) == [
        f"run config data-files = 'cifar10.parquet' is relative to {tmp_path}, but the app runs in RUN_DIR/app; "
        f"give it as '{tmp_path / 'cifar10.parquet'}'"
    ]
