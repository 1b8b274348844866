"""The command line: one-line errors, schema, registries, and reports."""

import csv
import errno
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from cli_errors import one_line_error
from tiny_configs import tiny_config, tiny_raw

from fedsim.cli import main
from fedsim.core.errors import ConfigError
from fedsim.rundir.writer import RunStore


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("data:\n  dataset: digits\nfederation:\n  rounds: 2\n")
    return path


def test_validate_accepts_a_good_config(capsys, config_file):
    code, out, _ = run_cli(capsys, "validate", str(config_file))
    assert code == 0 and "valid" in out and "2 rounds" in out


def test_validate_rejects_a_typo_in_one_line(capsys, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("client:\n  lrr: 0.1\n")
    code, _, err = run_cli(capsys, "validate", str(path))
    assert code == 2
    assert err.count("\n") == 1 and "client.lrr" in err and "did you mean 'lr'" in err


def test_a_bad_override_fails_before_anything_runs(capsys, config_file):
    code, _, err = run_cli(capsys, "run", str(config_file), "--set", "federation.fraction_fit=2", "--quiet")
    assert code == 2 and "federation.fraction_fit = 2" in err and "Traceback" not in err
    assert not (config_file.parent / "runs").exists()


def test_resume_of_a_missing_run_is_one_line(capsys, tmp_path):
    code, _, err = run_cli(capsys, "run", "--resume", str(tmp_path / "nope"), "--quiet")
    assert code == 2 and "not a fedsim run directory" in err


def test_config_schema_prints_every_section(capsys):
    code, out, _ = run_cli(capsys, "config-schema")
    assert code == 0
    for key in (
        "data.partition[dirichlet].alpha",
        "federation.client_resources.gpus",
        "client.local_steps",
        "output.dir",
        "client.defenses[gradient_dropout].p",
        "adversary.attacks[ig].regularizers[tv].weight",
    ):
        assert key in out


def test_list_shows_registered_data_sets_and_models(capsys):
    code, out, _ = run_cli(capsys, "list")
    assert code == 0
    for name in ("digits", "lfw-faces", "npz", "lenet", "resnet18", "mlp5", "tv:<name>", "fedavg"):
        assert name in out


def test_list_shows_every_defense_including_the_configuration_level_ones(capsys):
    code, out, _ = run_cli(capsys, "list")
    assert code == 0
    for name in (
        "dpsgd",
        "pdpsgd",
        "noise",
        "clip",
        "prune",
        "gradient_dropout",
        "soteria",
        "client.local_steps",
        "model.dropout",
    ):
        assert name in out


def test_report_writes_a_plot_and_tables(capsys, tmp_path):
    from fedsim.config import parse_config

    store = RunStore.create(parse_config({}), "cpu", tmp_path / "run")
    for server_round, accuracy in enumerate([0.1, 0.5, 0.8]):
        store.append(
            {
                "round": server_round,
                "event": "eval",
                "loss": 2.0 - accuracy,
                "accuracy": accuracy,
                "precision": accuracy,
                "recall": accuracy,
                "specificity": 0.9,
                "f1": accuracy,
                "mcc": accuracy,
            }
        )
    code, _, _ = run_cli(capsys, "report", str(store.run_dir))
    assert code == 0
    png = store.run_dir / "report" / "utility.png"
    assert png.stat().st_size > 5000 and png.read_bytes()[:4] == b"\x89PNG"
    assert "| 2 | 1.2000 | 0.8000 |" in (store.run_dir / "report" / "summary.md").read_text()
    assert (store.run_dir / "report" / "rounds.csv").read_text().count("\n") == 4


def test_report_lists_the_defenses_and_the_epsilon_spent_per_round(capsys, tmp_path):
    from fedsim.config import parse_config

    config = parse_config(
        {
            "client": {
                "local_steps": 3,
                "defenses": [{"name": "dpsgd", "noise_multiplier": 1.0}, {"name": "prune", "ratio": 0.5}],
            }
        }
    )
    store = RunStore.create(config, "cpu", tmp_path / "run")
    for server_round in (0, 1, 2):
        store.append({"round": server_round, "event": "eval", "loss": 1.0, "accuracy": 0.5})
        for client, epsilon in enumerate([0.4, 0.9]):
            if server_round:
                store.append(
                    {
                        "round": server_round,
                        "event": "fit",
                        "client": client,
                        "defense.dpsgd.epsilon": epsilon * server_round,
                    }
                )
    run_cli(capsys, "report", str(store.run_dir))
    summary = (store.run_dir / "report" / "summary.md").read_text()
    assert "- `dpsgd`: max_grad_norm=1.0, noise_multiplier=1.0" in summary
    assert "- `prune`: ratio=0.5, scope=global" in summary
    assert "- local training: 3 step(s) per round" in summary and "- model dropout: 0.0" in summary
    with open(store.run_dir / "report" / "rounds.csv", newline="") as handle:
        rounds = list(csv.DictReader(handle))
    assert [row["epsilon_example"] for row in rounds] == ["", "0.9", "1.8"]  # the largest client's
    assert [row["epsilon_client"] for row in rounds] == ["", "", ""]  # no central DP: never merged into one column
    assert "epsilon" not in rounds[0]


def test_report_of_a_folder_without_metrics_is_one_line(capsys, tmp_path):
    code, _, err = run_cli(capsys, "report", str(tmp_path))
    assert code == 2 and "no metrics.jsonl" in err


def test_list_shows_ggssr_with_its_prior_requirement_the_priors_and_rv(capsys):
    code, out, _ = run_cli(capsys, "list")
    assert code == 0
    (ggssr,) = [line for line in out.splitlines() if line.strip().startswith("ggssr ")]
    assert "prior:" in ggssr
    assert "diffusers" in out and "fedsim vulnerability CONFIG" in out and "RV (Reconstruction Vulnerability" in out


def write_config(tmp_path, **overrides):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tiny_raw(**overrides)))
    return path


def test_validate_checks_that_the_checkpoint_exists(tmp_path, capsys):
    config = write_config(tmp_path, model={"checkpoint": str(tmp_path / "missing.pt")})
    assert one_line_error(capsys, "validate", str(config)).endswith(
        f"model.checkpoint = '{tmp_path / 'missing.pt'}': no such file"
    )


def test_an_output_dir_that_is_a_file_or_not_writable_is_one_line(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    config = write_config(tmp_path, output={"dir": str(tmp_path / "afile")})
    assert one_line_error(capsys, "validate", str(config)).endswith(
        f"output.dir = '{tmp_path / 'afile'}': is a file, not a folder"
    )
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        if not __import__("os").access(locked, __import__("os").W_OK):  # root may write anywhere
            with pytest.raises(ConfigError, match=r"^output.dir = .*is not writable"):
                RunStore.create(tiny_config(output={"dir": str(locked / "runs")}), "cpu")
    finally:
        locked.chmod(0o700)


def images(count):
    return np.zeros((count, 8, 8), np.float32)


def test_a_failed_start_leaves_no_run_directory(tmp_path, capsys):
    config = write_config(
        tmp_path, data={"dataset": "npz", "path": str(tmp_path / "data.npz")}, output={"dir": str(tmp_path / "runs")}
    )
    np.savez(tmp_path / "data.npz", x=images(1), y=np.array([0]))
    assert "cannot split 1 samples" in one_line_error(capsys, "run", str(config), "--quiet")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_lpips_required_without_the_weights_refuses_to_start_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    monkeypatch.delenv("FEDSIM_LPIPS_WEIGHTS", raising=False)
    config = write_config(
        tmp_path, adversary={"attacks": ["dlg"], "lpips": "required"}, output={"dir": str(tmp_path / "runs")}
    )
    assert "adversary.lpips = 'required': no ImageNet AlexNet weights" in one_line_error(
        capsys, "run", str(config), "--quiet"
    )
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.parametrize(
    ("command", "flag", "value"),
    [
        (["prior", "train", "--out", "{out}"], "--steps", "0"),
        (["prior", "train", "--out", "{out}"], "--steps", "-5"),
        (["prior", "train", "--out", "{out}"], "--threads", "0"),
        (["sweep", "{config}"], "--parallel", "0"),
        (["sweep", "{config}"], "--cpus", "-1"),
        (["run", "--resume", "{out}"], "--rounds", "0"),
        (["vulnerability", "{config}"], "--samples", "0"),
    ],
)
def test_counts_on_the_command_line_are_whole_numbers_of_one_or_more(capsys, tmp_path, command, flag, value):
    paths = {"out": str(tmp_path / "out"), "config": str(tmp_path / "config.yaml")}
    line = one_line_error(capsys, *[part.format(**paths) for part in command], flag, value)
    assert line == f"fedsim: error: {flag} = {value}; allowed: 1 or more"
    assert not (tmp_path / "out").exists()


def test_validate_refuses_a_client_bigger_than_this_machine(capsys, tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(tiny_raw(federation={"client_resources": {"cpus": 100_000}})))
    line = one_line_error(capsys, "validate", str(path))
    assert line.startswith("fedsim: error: federation.client_resources.cpus = 100000: no client fits in the ")


def test_resume_with_a_malicious_round_checkpoint_is_one_line_and_runs_nothing(tmp_path, capsys):
    from malicious_pickles import assert_really_malicious, save_malicious

    assert_really_malicious(tmp_path)
    store = RunStore.create(tiny_config(output={"dir": str(tmp_path / "runs")}), "cpu", tmp_path / "runs" / "r")
    store.save_checkpoint(0, {"w": torch.zeros(2)})
    sentinel = tmp_path / "code-ran"
    save_malicious(store.checkpoint_path(0), sentinel, w=torch.zeros(2))
    store.close()  # the run stopped: its writer let go of the directory
    line = one_line_error(capsys, "run", "--resume", str(store.run_dir), "--quiet")
    assert str(store.checkpoint_path(0)) in line and "holds objects other than tensors" in line
    assert not sentinel.exists()


# ------------------------------------------------------------------ a full disk, Ctrl-C: one line, a real path


class _InterruptedEngine:
    """Stands in for Flower's simulation: the first round is committed, then Ctrl-C arrives in round 2."""

    def __init__(self, *args) -> None:
        pass

    def environment(self) -> dict:
        return {"engine": "simulation"}

    def play(self, protocol, server, *args) -> None:
        server.store.save_checkpoint(0, server.initial_state)
        server.store.save_checkpoint(1, server.initial_state)
        raise KeyboardInterrupt


class _StoppedBeforeRoundZeroEngine(_InterruptedEngine):
    """SIGTERM arrives while the federation starts: no round was committed."""

    def play(self, protocol, server, *args) -> None:
        server.stop.request(signal.SIGTERM)
        server.stop.check()


def test_ctrl_c_during_a_run_names_its_real_run_directory_and_the_round_it_stopped(tmp_path, capsys, monkeypatch):
    import fedsim.engine.run as runner

    monkeypatch.setattr(runner, "SimulationEngine", _InterruptedEngine)
    config = write_config(tmp_path, federation={"rounds": 3}, output={"dir": str(tmp_path / "runs")})
    code, _, err = run_cli(capsys, "run", str(config), "--quiet")
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert code == 130 and "RUN_DIR" not in err
    assert err.strip() == f"fedsim: interrupted in round 2; resume with `fedsim run --resume {run_dir}`"


def test_a_stop_before_the_first_commit_exits_143_on_sigterm_and_leaves_no_run_directory(tmp_path, capsys, monkeypatch):
    import fedsim.engine.run as runner

    monkeypatch.setattr(runner, "SimulationEngine", _StoppedBeforeRoundZeroEngine)
    config = write_config(tmp_path, output={"dir": str(tmp_path / "runs")})
    code, _, err = run_cli(capsys, "run", str(config), "--quiet")
    assert code == 143
    assert err.strip() == "fedsim: interrupted before the first round; nothing to resume"
    assert list((tmp_path / "runs").iterdir()) == []


def test_ctrl_c_before_the_run_directory_exists_gives_a_hint_without_a_placeholder(tmp_path, capsys, monkeypatch):
    import fedsim.engine.run as runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "prepare_federation", interrupted)
    config = write_config(tmp_path, output={"dir": str(tmp_path / "runs")})
    code, _, err = run_cli(capsys, "run", str(config), "--quiet")
    assert code == 130 and "RUN_DIR" not in err and "--resume" not in err
    assert err.strip() == "fedsim: interrupted before the first round; nothing to resume"
    assert not (tmp_path / "runs").exists()


def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as the kernel reports it: no file name


def _line_and_log(err: str, tmp_path) -> tuple[str, str]:
    """The one line a failed write prints, without its pointer, and the traceback in the log it points to."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    line, _, log = lines[0].rpartition(" (traceback in ")
    log = Path(log.removesuffix(")"))
    assert log.parent == tmp_path and "Traceback" in log.read_text()
    return line, log.read_text()


@pytest.fixture
def logs_in_tmp_path(tmp_path, monkeypatch):
    """Failure logs go to the test's own folder, not the machine's temporary one."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


@pytest.mark.parametrize("where", ["row", "checkpoint"])
def test_a_full_disk_during_a_run_is_one_line_naming_the_file_and_the_resume(
    tmp_path, capsys, monkeypatch, where, logs_in_tmp_path
):
    from full_disk import fill_the_disk_for_atomic_writes

    import fedsim.core.atomic as atomic
    import fedsim.engine.run as runner

    config = write_config(tmp_path, output={"dir": str(tmp_path / "runs")})
    run_dir = tmp_path / "runs" / "r"

    def run_until_the_disk_fills(*args, **kwargs):
        store = RunStore.create(tiny_config(), "cpu", run_dir)
        if where == "row":
            monkeypatch.setattr(atomic.os, "write", _full_disk)
            store.append({"round": 0, "event": "eval", "accuracy": 0.1})
        else:
            fill_the_disk_for_atomic_writes(monkeypatch)
            store.save_checkpoint(0, {"w": torch.zeros(2)})

    monkeypatch.setattr(runner, "run_experiment", run_until_the_disk_fills)
    code, _, err = run_cli(capsys, "run", str(config), "--quiet")
    line, _ = _line_and_log(err, tmp_path)
    written = run_dir / ("metrics.jsonl" if where == "row" else "checkpoints")
    assert code == 1
    assert line.startswith(f"fedsim: error: no space left on device writing {written}")
    assert line.endswith(f"; free space and resume with `fedsim run --resume {run_dir}`")


def test_a_full_disk_outside_a_run_directory_is_one_line_too(tmp_path, capsys, monkeypatch, logs_in_tmp_path):
    import fedsim.reporting

    def full(run_dir, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "elsewhere" / "x.png"))

    monkeypatch.setattr(fedsim.reporting, "write_report", full)
    (tmp_path / "elsewhere").mkdir()
    code, _, err = run_cli(capsys, "report", str(tmp_path / "elsewhere"))
    written = tmp_path / "elsewhere" / "x.png"
    line, _ = _line_and_log(err, tmp_path)
    assert code == 1
    assert line == f"fedsim: error: no space left on device writing {written}; free space and run the command again"


def test_a_full_disk_during_a_sweep_is_one_line_with_the_sweep_resume(tmp_path, capsys, monkeypatch, logs_in_tmp_path):
    import fedsim.sweep

    def full(plan, **kwargs):
        plan.sweep_dir.mkdir(parents=True, exist_ok=True)
        (plan.sweep_dir / "sweep.json").write_text("{}")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(plan.sweep_dir / "sweep.json"))

    monkeypatch.setattr(fedsim.sweep, "run_sweep", full)
    config = tmp_path / "s.yaml"
    config.write_text(yaml.safe_dump(tiny_raw(sweep={"grid": {"seed": [0, 1]}})))
    code, _, err = run_cli(capsys, "sweep", str(config), "--out", str(tmp_path / "s"), "--quiet")
    sweep_dir = tmp_path / "s"
    line, _ = _line_and_log(err, tmp_path)
    assert code == 1 and line == (
        f"fedsim: error: no space left on device writing {sweep_dir / 'sweep.json'}; "
        f"free space and resume with `fedsim sweep --resume {sweep_dir}`"
    )


def test_audit_of_a_folder_that_is_no_flower_app_is_one_line(capsys, tmp_path):
    line = one_line_error(capsys, "audit", str(tmp_path))
    assert line == f"fedsim: error: APP_DIR = '{tmp_path}': no pyproject.toml there; a Flower app's folder has one"
