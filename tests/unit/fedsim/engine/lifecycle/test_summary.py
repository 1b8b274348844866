"""The end-of-run summary line: true numbers, never 'nan' for a score that exists or a round that never ran."""

import pytest
from tiny_configs import tiny_config

from fedsim.engine.lifecycle.summary import log_summary, training_plateau, utility_summary


def summary(final: dict, best: float | None, rounds: int) -> dict:
    return {"final": final, "best_accuracy": best, "rounds_completed": rounds, "client_failures": 0}


def test_a_best_accuracy_of_zero_is_printed_as_zero(fedsim_log):
    log_summary(summary({"accuracy": 0.0, "loss": 2.3}, best=0.0, rounds=3))
    assert "finished 3 rounds: test accuracy 0.0000 (best 0.0000), loss 2.3000" in fedsim_log.text
    assert "nan" not in fedsim_log.text


def test_a_run_without_an_evaluated_round_says_so_instead_of_nan(fedsim_log):
    log_summary(summary({}, best=None, rounds=0))
    assert "finished 0 rounds: no evaluated round" in fedsim_log.text
    assert "nan" not in fedsim_log.text


def test_an_audited_app_that_evaluated_itself_prints_its_own_numbers_not_no_evaluated_round(fedsim_log):
    log_summary({**summary({}, best=None, rounds=3), "app_evaluation": {"app_central_accuracy": 0.4125}})
    assert "finished 3 rounds: the app's own evaluation: app_central_accuracy 0.4125" in fedsim_log.text
    assert "no evaluated round" not in fedsim_log.text


def test_an_audited_run_prints_its_bound_beside_the_accountant_epsilon(fedsim_log):
    audit = {
        "audit_epsilon_lower": 1.2,
        "audit_confidence": 0.95,
        "audit_delta": 1e-5,
        "audit_adjacency": "example",
        "audit_threat_model": "white-box",
        "epsilon_example": 4.0,
    }
    log_summary({**summary({"accuracy": 0.5}, best=0.5, rounds=3), "audit": audit})
    assert (
        "privacy audit (example level, white-box): epsilon >= 1.20 at 95% confidence (delta 1e-05); "
        "accountant's epsilon 4.00" in fedsim_log.text  # a run audited before the f-DP analysis
    )


def test_the_end_of_run_lines_name_each_epsilon_with_its_delta_and_what_it_protects(fedsim_log):
    spent = {"epsilon_example": 7.98, "delta_example": 1e-5, "epsilon_client": None, "delta_client": None}
    log_summary(summary({"accuracy": 0.5, "loss": 1.0}, best=0.5, rounds=3) | spent)
    assert "epsilon_example = 7.98 (δ=1e-05), example-level: add/remove one sample of a client" in fedsim_log.text
    assert "epsilon_client" not in fedsim_log.text  # no central DP in this run


def evals(*accuracies: float) -> list[dict]:
    return [{"round": r, "event": "eval", "accuracy": a} for r, a in enumerate(accuracies)]


def test_the_summary_reports_the_plateau_and_the_rounds_to_the_target_accuracy():
    config = tiny_config(
        federation={"rounds": 20, "plateau": {"patience": 2, "min_delta": 0.01}, "target_accuracy": 0.9}
    )
    rows = evals(0.1, 0.7, 0.91, 0.915, 0.912, 0.95)
    assert utility_summary(config.federation, config.adversary.last_attacked_round(), rows) == {
        "plateau": {"round": 4, "accuracy": pytest.approx((0.915 + 0.912) / 2), "best_round": 2, "best_accuracy": 0.91},
        "target_accuracy": 0.9,
        "rounds_to_target": 2,
    }


def plateau_of_run(config, rows):
    return training_plateau(config.federation.plateau, config.adversary.last_attacked_round(), rows)


def test_the_plateau_never_holds_before_the_last_attacked_round():
    plateau = {"rounds": 20, "plateau": {"patience": 2, "min_delta": 0.0}}
    rows = evals(0.5, 0.5, 0.5, 0.5, 0.5, 0.5)
    flat = {"accuracy": 0.5, "best_round": 0, "best_accuracy": 0.5}
    assert plateau_of_run(tiny_config(federation=plateau), rows) == {"round": 2, **flat}
    attacked = tiny_config(federation=plateau, adversary={"attacks": [{"name": "dlg"}], "rounds": [1, 5]})
    assert plateau_of_run(attacked, rows) == {"round": 5, **flat}
    assert plateau_of_run(attacked, rows[:5]) is None
    assert plateau_of_run(tiny_config(federation={"rounds": 20}), rows) is None  # criterion off
