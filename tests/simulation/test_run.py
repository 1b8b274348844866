"""End-to-end Flower simulations (Ray backend): a full run, failing clients, resume after kill -9, a run whose
every update is non-finite, and `fedsim run --report` printing its leakage table."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from tiny_configs import TRAINING, merged, tiny_raw

from fedsim.config import parse_config
from fedsim.core.errors import TrainingFailed
from fedsim.engine.run import run_experiment
from fedsim.reporting import write_report
from fedsim.rundir.ground_truth import GroundTruthStore
from fedsim.rundir.writer import RunStore

pytestmark = pytest.mark.simulation


SMALL = merged(TRAINING, name="e2e")


def events(run_dir: Path, event: str) -> list[dict]:
    return [row for row in RunStore(run_dir).rows() if row["event"] == event]


@pytest.fixture(scope="module")
def two_round_run(tmp_path_factory) -> Path:
    raw = merged(
        SMALL,
        federation={"fraction_evaluate": 0.5},
        output={"dir": str(tmp_path_factory.mktemp("runs")), "run_name": "two-rounds"},
    )
    return run_experiment(parse_config(raw), quiet=True)


def test_every_round_is_evaluated_on_the_test_set(two_round_run):
    evals = events(two_round_run, "eval")
    assert [row["round"] for row in evals] == [0, 1, 2]
    for row in evals:
        for metric in ("loss", "accuracy", "precision", "recall", "specificity", "f1", "mcc"):
            assert np.isfinite(row[metric])
    assert evals[-1]["clients_ok"] == 3 and evals[-1]["clients_failed"] == 0


def test_every_client_reports_its_fit(two_round_run):
    fits = events(two_round_run, "fit")
    assert sorted((row["round"], row["client"]) for row in fits) == [(r, c) for r in (1, 2) for c in range(3)]
    assert all(row["status"] == "ok" and row["local_steps"] == 5 and row["num_examples"] > 0 for row in fits)


def test_sampled_clients_evaluate_the_global_model_on_their_own_data(two_round_run):
    client_evals = events(two_round_run, "client_eval")
    assert sorted(row["round"] for row in client_evals) == [1, 2]  # half of 3 clients, at least one
    assert all(row["status"] == "ok" and 0 <= row["accuracy"] <= 1 for row in client_evals)


def test_report_of_a_real_run(two_round_run):
    png, markdown, table = write_report(two_round_run)[:3]  # the run's own files, then the full report's
    assert png.stat().st_size > 5000
    assert markdown.read_text().count("\n| ") == 4  # header + rounds 0, 1, 2
    assert table.read_text().splitlines()[0].startswith("round,loss,accuracy")


def test_checkpoints_load_safely_and_differ_by_round(two_round_run):
    store = RunStore(two_round_run)
    first, last = store.load_checkpoint(1), store.load_checkpoint(2)
    assert set(first) == set(last)
    assert any(not torch.equal(first[k], last[k]) for k in first)


def test_ground_truth_lists_the_samples_each_client_used(two_round_run):
    partitions = json.loads((two_round_run / "partitions.json").read_text())["clients"]
    truth = GroundTruthStore(two_round_run)
    assert truth.clients(1) == [0, 1, 2]
    for client in range(3):
        record = truth.read(2, client)
        assert len(record["batches"]) == 5
        used = {i for batch in record["batches"] for i in batch}
        assert used <= set(partitions[client]["sample_ids"])


def test_summary_and_resolved_config_are_written(two_round_run):
    summary = json.loads((two_round_run / "summary.json").read_text())
    assert summary["rounds_completed"] == 2 and summary["client_failures"] == 0
    resolved = yaml.safe_load((two_round_run / "config.yaml").read_text())
    assert resolved["client"]["local_steps"] == 5 and resolved["data"]["partition"]["alpha"] == 1.0


def test_failing_clients_are_recorded_and_the_round_goes_on(tmp_path):
    failures = [{"round": 1, "client": 1, "kind": "exception"}, {"round": 2, "client": 0, "kind": "nan"}]
    raw = merged(SMALL, federation={"failures": failures}, output={"dir": str(tmp_path)})
    run_dir = run_experiment(parse_config(raw), quiet=True)
    failed = [row for row in events(run_dir, "fit") if row["status"] == "failed"]
    assert [(row["round"], row["client"]) for row in failed] == [(1, 1), (2, 0)]
    assert "InjectedFailure" in failed[0]["error"]
    assert "NonFiniteLossError" in failed[1]["error"]
    evals = events(run_dir, "eval")
    assert [(row["clients_ok"], row["clients_failed"], row["model_updated"]) for row in evals[1:]] == [
        (2, 1, True),
        (2, 1, True),
    ]
    assert GroundTruthStore(run_dir).clients(1) == [0, 2]  # the failed client trained on nothing


def test_too_few_successful_clients_leave_the_model_unchanged(tmp_path):
    failures = [{"round": 1, "client": c, "kind": "exception"} for c in (0, 1)]
    raw = merged(
        SMALL,
        federation={"rounds": 1, "min_fit_clients": 2, "failures": failures},
        output={"dir": str(tmp_path)},
    )
    with pytest.raises(TrainingFailed, match="no round updated the global model in rounds 1-1"):
        run_experiment(parse_config(raw), quiet=True)  # it could not train: an error, with every row kept
    (run_dir,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    evals = events(run_dir, "eval")
    assert evals[1]["model_updated"] is False and evals[1]["clients_failed"] == 2
    assert evals[1]["accuracy"] == evals[0]["accuracy"]


def _fedsim(*args: str) -> list[str]:
    return [sys.executable, "-m", "fedsim.cli", *args]


INTERRUPTED_ROUNDS = 12  # rounds after the first are short: a wide window for the signal on a loaded machine
#: the run the kill and Ctrl-C tests interrupt: round 1's attack is still under way when the signal comes in round 2
#: (it is abandoned, and attacked again on resume); targets of 40 images keep the attack's scoring short
INTERRUPTED = merged(
    SMALL,
    data={"image_size": 16},
    model={"name": "cnn", "width": 16},
    federation={"rounds": INTERRUPTED_ROUNDS},
    client={"local_steps": 10, "batch_size": 4},
    adversary={"targets": "per-client", "rounds": [1], "attacks": [{"name": "idlg", "iterations": 5}]},
)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    """``INTERRUPTED`` run to its end without a signal: what both resumed runs must end with."""
    out = tmp_path_factory.mktemp("reference")
    return run_experiment(
        parse_config(merged(INTERRUPTED, output={"dir": str(out), "run_name": "reference"})), quiet=True
    )


def test_resume_after_kill_gives_the_same_metrics_as_an_uninterrupted_run(tmp_path, uninterrupted):
    rounds = INTERRUPTED_ROUNDS
    raw = merged(INTERRUPTED, output={"dir": str(tmp_path), "run_name": "killed"})
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(raw))

    killed = tmp_path / "killed"
    process = subprocess.Popen(
        _fedsim("run", str(config_path), "--quiet"),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while not (killed / "checkpoints" / "round_0002.pt").exists():
        assert process.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline, "the run never reached round 2"
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)  # the driver and its Ray workers, like kill -9 on the job
    process.wait()
    interrupted_at = RunStore(killed).last_committed_round()
    assert interrupted_at < rounds, "the kill came too late to interrupt the run"
    assert not (killed / "summary.json").exists()

    resumed = subprocess.run(_fedsim("run", "--resume", str(killed), "--quiet"), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]

    reference = uninterrupted

    def comparable(run_dir: Path) -> list[dict]:
        drop = {"time", "seconds"}
        return [
            {k: v for k, v in row.items() if k not in drop}
            for row in RunStore(run_dir).rows()
            if row["event"] in ("eval", "fit")
        ]

    def keyed(rows: list[dict]) -> list[dict]:
        return sorted(rows, key=lambda row: (row["round"], row["event"], row.get("client", -1)))

    assert keyed(comparable(killed)) == keyed(comparable(reference))
    assert [row["round"] for row in events(killed, "eval")] == list(range(rounds + 1))
    for key, value in RunStore(reference).load_checkpoint(rounds).items():
        assert torch.equal(RunStore(killed).load_checkpoint(rounds)[key], value)


def _wall_clock_free(rows: list[dict]) -> list[dict]:
    """Rows without their wall-clock fields, in a fixed order (attack rows interleave with training)."""
    timed = ("time", "seconds")
    kept = [{k: v for k, v in row.items() if not any(t in k for t in timed)} for row in rows]
    return sorted(kept, key=lambda row: json.dumps(row, sort_keys=True))


def test_ctrl_c_stops_a_run_with_attacks_cleanly_and_its_resume_matches_an_uninterrupted_run(tmp_path, uninterrupted):
    """Ctrl-C (SIGINT to the whole process group) in round 2: the round in progress is not committed, every
    process of the run ends (no orphan runs on), the exit status is 130 with one line naming the round and the
    directory, and `--resume` ends with the rows and the model of a run that was never interrupted."""
    from processes import signal_when, still_running

    rounds = INTERRUPTED_ROUNDS
    raw = merged(INTERRUPTED, output={"dir": str(tmp_path), "run_name": "stopped"})
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    stopped = tmp_path / "stopped"
    process = subprocess.Popen(
        _fedsim("run", str(config_path), "--quiet"),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    children = signal_when(process, stopped / "checkpoints" / "round_0001.pt", signal.SIGINT, group=True)
    committed_at_signal = RunStore(stopped).last_committed_round()
    _, err = process.communicate(timeout=120)
    assert still_running(children) == []
    assert process.returncode == 130, err[-2000:]
    committed = RunStore(stopped).last_committed_round()
    assert committed < rounds, "the signal came too late to interrupt the run"
    assert committed <= committed_at_signal + 1  # at most the commit under way when the signal came
    assert err.strip().splitlines()[-1] == (
        f"fedsim: interrupted in round {committed + 1}; resume with `fedsim run --resume {stopped}`"
    ), err[-4000:]
    assert [row["round"] for row in events(stopped, "eval")] == list(range(committed + 1))

    resumed = subprocess.run(_fedsim("run", "--resume", str(stopped), "--quiet"), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    reference = uninterrupted
    assert _wall_clock_free(RunStore(stopped).rows()) == _wall_clock_free(RunStore(reference).rows())
    for key, value in RunStore(reference).load_checkpoint(rounds).items():
        assert torch.equal(RunStore(stopped).load_checkpoint(rounds)[key], value)


@pytest.mark.simulation
def test_a_run_whose_every_update_is_non_finite_fails_with_a_non_zero_exit_and_keeps_its_rows(tmp_path, capsys):
    import yaml

    from fedsim.cli import main

    config = tmp_path / "broken.yaml"
    raw = tiny_raw(
        client={"defenses": [{"name": "noise", "sigma": 1e39}]}, output={"dir": str(tmp_path), "run_name": "broken"}
    )
    config.write_text(yaml.safe_dump(raw))
    assert main(["run", str(config), "--quiet"]) == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("fedsim: error: the run could not train: no round updated the global model")
    rows = RunStore(tmp_path / "broken").rows()
    fits = [row for row in rows if row["event"] == "fit"]
    assert fits and all(row["status"] == "failed" and "not finite" in row["error"] for row in fits)
    assert [row["model_updated"] for row in rows if row["event"] == "eval" and row["round"] > 0] == [False]


@pytest.mark.simulation
def test_run_with_report_prints_the_table_writes_the_report_and_ends_with_the_run_directory(tmp_path, capsys):
    from fedsim.cli import main

    raw = tiny_raw(
        data={"max_train_samples": 2},
        adversary={"targets": "both", "attacks": [{"name": "dlg", "iterations": 20}]},
        output={"dir": str(tmp_path), "run_name": "first"},
    )
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert main(["run", str(config), "--quiet", "--report"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == str(tmp_path / "first")
    assert any("client:0" in line and "aggregate" in line for line in out)
    report = tmp_path / "first" / "report" / "report.html"
    assert report.is_file() and "reconstruction" in report.read_text().lower()
