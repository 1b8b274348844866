"""An adversary attacks a live Flower federation: rows, images and both taps, end to end; --resume re-attacks
what a killed run left, and a malicious server reads images out of a real SecAgg+ aggregate."""

import json

import pytest
from fake_clocks import install, stepping
from tiny_configs import tiny_config

from fedsim.engine.run import run_experiment
from fedsim.rundir.backlog import AttackBacklog
from fedsim.rundir.writer import RunStore

pytestmark = pytest.mark.simulation


def attacked_run(tmp_path, **adversary) -> list[dict]:
    config = tiny_config(
        name="attacked",
        data={"max_train_samples": 2},
        federation={"rounds": 2},
        adversary={"rounds": [2], "attacks": [{"name": "dlg", "iterations": 30, "restarts": 2}], **adversary},
        output={"dir": str(tmp_path), "run_name": "run"},
    )
    run_dir = run_experiment(config, quiet=True)
    return [row for row in RunStore(run_dir).rows() if row["event"] == "attack"]


def test_a_wire_tap_attacks_each_client_and_the_aggregate(tmp_path):
    rows = attacked_run(tmp_path, tap="mitm", targets="both")
    assert sorted(row["target"] for row in rows) == ["aggregate", "client:0", "client:1"]
    for row in rows:
        assert row["round"] == 2 and row["tap"] == "mitm" and row["status"] == "ok" and row["attack"] == "dlg"
        assert row["pairing"] == "hungarian-mse" and row["iterations"] == 30
        for metric in ("mse_mean", "ssim_mean", "label_accuracy", "objective", "seconds"):
            assert isinstance(row[metric], float)
        assert row["lpips_mean"] is None or isinstance(row["lpips_mean"], float)
        json.dumps(row, allow_nan=False)
    assert {row["batch_size"] for row in rows} == {1, 2}
    grids = sorted(p.name for p in (tmp_path / "run" / "reconstructions").glob("*.png"))
    assert grids == ["round_0002_aggregate_dlg.png", "round_0002_client-0_dlg.png", "round_0002_client-1_dlg.png"]


def test_an_honest_but_curious_server_sees_what_the_strategy_sees(tmp_path):
    rows = attacked_run(tmp_path, tap="server", targets="aggregate", clients="all")
    assert [(row["tap"], row["target"], row["batch_size"]) for row in rows] == [("server", "aggregate", 2)]


def test_attacks_limited_to_one_kind_of_target_run_as_separate_jobs_side_by_side(tmp_path, monkeypatch):
    from adversary.workers import ProcessAttackWorkers

    calls = []
    real_submit = ProcessAttackWorkers.submit

    def recording_submit(self, job):
        calls.append((job.options.name, sorted(view.target for view in job.views)))
        return real_submit(self, job)

    monkeypatch.setattr(ProcessAttackWorkers, "submit", recording_submit)
    attacks = [
        {"name": "dlg", "iterations": 20, "inverts": "per-client"},
        {"name": "ig", "iterations": 20, "tv_weight": 0.03, "inverts": "aggregate"},
    ]
    rows = attacked_run(tmp_path, tap="mitm", targets="both", attacks=attacks, workers=2)
    assert sorted((row["attack"], row["target"]) for row in rows) == [
        ("dlg", "client:0"),
        ("dlg", "client:1"),
        ("ig", "aggregate"),
    ]
    assert sorted(calls) == [("dlg", ["client:0", "client:1"]), ("ig", ["aggregate"])]


def test_an_attack_past_its_time_limit_is_scored_on_its_best_so_far_and_one_cut_before_any_iteration_is_not(
    tmp_path, monkeypatch
):
    from adversary.workers import ProcessAttackWorkers

    real_submit = ProcessAttackWorkers.submit

    def submit_on_a_test_clock(self, job):
        # the limits are read on a clock that moves 0.5 s per reading in the (one) worker, whatever the machine's load
        self.call(install, stepping, 0.5).result(timeout=120)
        return real_submit(self, job)

    monkeypatch.setattr(ProcessAttackWorkers, "submit", submit_on_a_test_clock)
    attacks = [
        {"name": "ig", "iterations": 10**6, "time_limit": 2},  # 4 readings: some iterations, then cut
        {"name": "dlg", "iterations": 10**6, "time_limit": 0.25},  # gone at the first reading: no iteration
    ]
    rows = attacked_run(tmp_path, tap="mitm", targets="per-client", attacks=attacks)
    ig = [row for row in rows if row["attack"] == "ig"]
    assert [row["target"] for row in ig] == ["client:0", "client:1"]  # both clients: one batched job
    for row in ig:
        assert row["status"] == "ok" and row["cut"] is True and 0 < row["iterations"] < 4
        assert isinstance(row["psnr_mean"], float) and row["verdict"] in ("leaks", "at floor")
    dlg = [row for row in rows if row["attack"] == "dlg"]
    assert [row["target"] for row in dlg] == ["client:0", "client:1"]
    for row in dlg:
        assert row["status"] == "no-iterations" and row["cut"] is True and row["iterations"] == 0
        assert "psnr_mean" not in row and "verdict" not in row and "time_limit = 0.25 s" in row["error"]


@pytest.mark.simulation
def test_resume_reattacks_the_rounds_whose_attacks_were_lost(tmp_path, monkeypatch):
    config = tiny_config(
        name="lost-attacks",
        seed=4,
        data={"max_train_samples": 4},
        federation={"rounds": 2},
        adversary={"tap": "mitm", "rounds": "all", "attacks": [{"name": "dlg", "iterations": 20}]},
        output={"dir": str(tmp_path), "run_name": "run"},
    )
    keep = AttackBacklog.discard
    monkeypatch.setattr(AttackBacklog, "discard", lambda self, server_round: None)  # as if killed before scoring
    run_dir = run_experiment(config, quiet=True)
    assert AttackBacklog(run_dir).rounds() == [1, 2]
    rows = RunStore(run_dir).rows()
    first_round = [row for row in rows if row["event"] == "attack" and row["round"] == 1]
    assert len(first_round) == 2
    # the kill lost round 1's attack rows; round 2's had been written
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in rows if not (row["event"] == "attack" and row["round"] == 1))
    )
    # rows removed under a commit are refused (fedsim.rundir.verify), and a run whose fingerprint says it keeps
    # a record refuses to resume without it; a run killed before it scored them has a record that never held them:
    # this one, edited after the fact, resumes as a run written before the record existed
    (run_dir / "commits.jsonl").unlink()
    fingerprint = json.loads((run_dir / "fingerprint.json").read_text())
    fingerprint.pop("integrity_record")
    (run_dir / "fingerprint.json").write_text(json.dumps(fingerprint))

    monkeypatch.setattr(AttackBacklog, "discard", keep)
    run_experiment(resume=run_dir, quiet=True)
    attacks = [row for row in RunStore(run_dir).rows() if row["event"] == "attack"]
    assert sorted((row["round"], row["target"]) for row in attacks) == [
        (1, "client:0"),
        (1, "client:1"),
        (2, "client:0"),
        (2, "client:1"),
    ]  # round 1 again, round 2 not twice
    redone = {row["target"]: row for row in attacks if row["round"] == 1}
    for before in first_round:  # same seeds, same reconstructions
        assert redone[before["target"]]["mse_mean"] == pytest.approx(before["mse_mean"], rel=1e-5)
    assert AttackBacklog(run_dir).rounds() == []


def malicious_run(tmp_path, verify_model=False, **overrides):
    config = tiny_config(
        name="malicious",
        data={"max_train_samples": 6},
        federation={"num_clients": 3, "fraction_evaluate": 0},
        client={"batch_size": 2, "verify_model": verify_model},
        output={"dir": str(tmp_path)},
        adversary={
            "tap": "server",
            "server": "malicious",
            "targets": "aggregate",
            "modification": {"name": "imprint", "bins": 64},
            "attacks": ["rtf"],
            "save_images": False,
        },
        **overrides,
    )
    return RunStore(run_experiment(config, quiet=True)).rows()


@pytest.mark.simulation
def test_a_malicious_server_reads_images_out_of_a_real_secagg_aggregate(tmp_path):
    rows = malicious_run(tmp_path, strategy={"name": "secagg+"})
    (attack,) = [row for row in rows if row["event"] == "attack"]
    assert (
        attack["status"] == "ok"
        and attack["threat_model"] == "malicious server"
        and attack["modification"] == "imprint"
    )
    assert attack["public_data"].startswith("test split")
    assert attack["recovered_40db"] >= 3  # of 6 images, summed under masks, quantised, unmasked
    (evaluation,) = [row for row in rows if row["event"] == "eval" and row["round"] == 1]
    assert evaluation["model_updated"] is False and evaluation["server_modified_model"] == "imprint"
    assert evaluation["secagg_clipping_range"] == 8.0  # the SecAgg+ settings the server chose, recorded


@pytest.mark.simulation
def test_clients_that_verify_the_model_refuse_the_imprint(tmp_path):
    rows = malicious_run(tmp_path, verify_model=True)
    fits = [row for row in rows if row["event"] == "fit"]
    assert fits and all(row["status"] == "failed" for row in fits)
    assert all(
        "refused the server's model (client.verify_model): a ImprintedModel instead of a" in row["error"]
        for row in fits
    )
    assert not [row for row in rows if row["event"] == "attack" and row.get("status") == "ok"]
