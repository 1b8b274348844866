"""Submitting a run to a SuperLink: flags checked first, an absolute run directory, one-line failures, and the
connection's TLS."""

from __future__ import annotations

import pytest
from repository import REPO_ROOT
from tiny_configs import tiny_config

from fedsim.cli import main
from fedsim.config import dump_config
from fedsim.engine.lifecycle.network import free_port


def test_an_unreachable_superlink_is_one_line_naming_the_address(capsys):
    address = f"127.0.0.1:{free_port()}"
    code = main(
        [
            "run",
            str(REPO_ROOT / "configs/quickstart.yaml"),
            "--engine",
            "deployment",
            "--superlink",
            address,
            "--insecure",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert err.startswith(f"fedsim: error: --superlink = '{address}': nothing answers there (Connection refused)")


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--engine", "deployment"], "--engine deployment: give --superlink HOST:PORT"),
        (
            ["--superlink", "127.0.0.1:9093"],
            "--superlink, --insecure and --root-certificates go with --engine deployment",
        ),
        (["--engine", "deployment", "--superlink", "localhost"], "--superlink = 'localhost': expected HOST:PORT"),
        (
            ["--engine", "deployment", "--superlink", "h:1", "--insecure", "--root-certificates", "ca.pem"],
            "exclude each other",
        ),
    ],
)
def test_deployment_flags_are_checked_before_anything_is_submitted(capsys, arguments, message):
    assert main(["run", str(REPO_ROOT / "configs/quickstart.yaml"), *arguments]) == 2
    assert message in capsys.readouterr().err


def test_a_new_deployed_run_gets_an_absolute_run_directory_and_its_config_no_engine(tmp_path, monkeypatch):
    from fedsim.engine.deployment.submit import planned_run_dir

    monkeypatch.chdir(tmp_path)
    config = tiny_config(name="tiny", output={"dir": "runs"})
    first = planned_run_dir(config)
    assert first.is_absolute() and first.parent == tmp_path / "runs" and first.name.startswith("tiny-")
    first.mkdir(parents=True)
    assert planned_run_dir(config).name == first.name + "-2"
    assert "engine" not in dump_config(config) and "superlink" not in dump_config(config)


class _FakeFlowerCli:
    """Answers `flwr log RUN --show` with a given log."""

    def __init__(self, log: str) -> None:
        self.log = log

    def __call__(self, *arguments: str, timeout: float = 0) -> str:
        assert arguments[0] == "log" and "--show" in arguments
        return self.log


def test_a_failed_run_is_one_line_with_its_serverapps_last_error():
    from fedsim.core.errors import TrainingFailed
    from fedsim.engine.deployment.submit import DeploymentError, SuperLink, run_failure

    superlink = SuperLink("127.0.0.1:9093", insecure=True)
    log = (
        "INFO: Start `flwr-serverapp` process\nTraceback (most recent call last):\n"
        "RuntimeError: client roll call failed: node 12 (partition 1): data.path = '/d.npz': no such file\n"
    )
    error = run_failure(_FakeFlowerCli(log), "42", "finished:failed", superlink)
    assert isinstance(error, DeploymentError) and "\n" not in str(error)
    assert str(error) == (
        "Flower run 42 on the SuperLink at 127.0.0.1:9093 ended finished:failed: RuntimeError: client "
        "roll call failed: node 12 (partition 1): data.path = '/d.npz': no such file"
    )
    untrained = run_failure(
        _FakeFlowerCli("fedsim.core.TrainingFailed: no round updated the global model\n"),
        "42",
        "finished:failed",
        superlink,
    )
    assert isinstance(untrained, TrainingFailed) and str(untrained) == "no round updated the global model"
    silent = run_failure(_FakeFlowerCli(""), "42", "finished:stopped", superlink)
    assert str(silent).endswith("ended finished:stopped: see `flwr log 42` against 127.0.0.1:9093")


def test_the_flower_connection_is_insecure_or_trusts_the_given_ca_or_the_systems(tmp_path):
    from fedsim.engine.deployment.submit import SuperLink

    assert SuperLink("h:1", insecure=True).connection()["superlink"]["fedsim"] == {"address": "h:1", "insecure": True}
    trusted = SuperLink("h:1", root_certificates=tmp_path / "ca.crt").connection()["superlink"]["fedsim"]
    assert trusted == {"address": "h:1", "root-certificates": str(tmp_path / "ca.crt")}
    assert SuperLink("h:1").connection()["superlink"] == {"default": "fedsim", "fedsim": {"address": "h:1"}}
