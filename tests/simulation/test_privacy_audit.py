"""A privacy audit in a live federation: DP-SGD whose noise is switched off behind its accountant's back is
caught, in the run's rows, its summary and one warning line; under SecAgg+ canary clients reach the server inside
the masked vectors and are audited from the sum it unmasks."""

import logging

import pytest
from tiny_configs import TRAINING, merged, tiny_config

import fedsim
from adversary.privacy_audit.bound import ceiling
from clients.defenses.dpsgd import NOISE_OFF_FOR_TESTS
from fedsim.config import parse_config
from fedsim.engine.run import run_experiment
from fedsim.rundir.writer import RunStore

pytestmark = [pytest.mark.simulation, pytest.mark.filterwarnings("ignore:Full backward hook is firing")]


def test_dpsgd_without_its_noise_gets_a_bound_above_its_epsilon_and_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(NOISE_OFF_FOR_TESTS, "1")  # inherited by the Ray workers the run starts
    config = tiny_config(
        name="audit",
        data={"max_train_samples": 200, "normalize": "global"},
        model={"name": "mlp3", "init": "default"},  # ~100k weights: a canary stands out of its own coordinate
        federation={"rounds": 3},
        client={"batch_size": 20, "local_steps": 15, "defenses": [{"name": "dpsgd", "target_epsilon": 4.0}]},
        adversary={"privacy_audit": {"canaries": 2000}},
        output={"dir": str(tmp_path), "run_name": "run"},
    )
    with caplog.at_level(logging.WARNING, logger="fedsim"):
        run_dir = run_experiment(config, quiet=True)
    (row,) = [row for row in RunStore(run_dir).rows() if row["event"] == "audit"]
    assert row["round"] == 3 and row["audit_adjacency"] == "example" and row["audit_threat_model"] == "white-box"
    assert row["epsilon_example"] == pytest.approx(4.0, abs=0.1)  # the ledger still claims the configured noise
    assert row["audit_epsilon_lower"] > 4.0
    assert row["audit_confidence"] == 0.95 and row["audit_delta"] == 1e-5 and row["audit_canaries"] == 2000
    warnings = [record.getMessage() for record in caplog.records if "exceeds the accountant" in record.getMessage()]
    assert len(warnings) == 1 and "DP is misconfigured or broken" in warnings[0]
    summary = fedsim.load_run(run_dir).summary["audit"]
    assert summary == {key: value for key, value in row.items() if key.startswith(("audit_", "epsilon_"))}


def test_secagg_runs_get_a_client_level_bound_and_andrew_et_al_estimate_from_the_unmasked_sum(tmp_path):
    """The sampled clients carry the canary clients inside the vectors they mask; nothing but the other clients'
    updates hides one in the sum the server unmasks, so the audit finds them all (no accountant claims anything)."""
    config = parse_config(
        merged(
            TRAINING,
            name="secagg-audit",
            strategy={"name": "secagg+"},
            adversary={"privacy_audit": {"canaries": 500}},
            output={"dir": str(tmp_path), "run_name": "run"},
        )
    )
    run_dir = run_experiment(config, quiet=True)
    store = RunStore(run_dir)
    assert all(row["status"] == "ok" for row in store.rows() if row["event"] == "fit")
    (row,) = [row for row in store.rows() if row["event"] == "audit"]
    assert row["audit_adjacency"] == "client" and row["epsilon_client"] is None
    assert row["audit_canary_norm"] == 1.0 and row["audit_canary_weight"] > 0
    # near what 500 canaries can show at most (4.65 / 8.70 with every guess right)
    assert 3.0 < row["audit_epsilon_lower"] <= ceiling(500, 1e-5)[0] + 1e-6
    assert row["audit_one_shot_epsilon_estimate"] > row["audit_epsilon_lower"]
    summary = fedsim.load_run(run_dir).summary["audit"]
    assert summary["audit_one_shot_mu_estimate"] == row["audit_one_shot_mu_estimate"]
