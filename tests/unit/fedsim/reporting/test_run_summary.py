"""A run's own summary page: the privacy audit's bound beside the accountant's epsilon, and its warning."""

from fedsim.reporting.run_summary import audit_lines

AUDIT = {
    "audit_epsilon_lower": 4.62,
    "audit_confidence": 0.95,
    "audit_delta": 1e-5,
    "audit_adjacency": "example",
    "audit_threat_model": "white-box",
    "audit_canaries": 1000,
    "audit_guesses": 500,
    "audit_correct": 500,
    "audit_model": "trained with the canaries",
    "epsilon_example": 4.0,
}


def test_the_audit_section_states_the_bound_the_accountant_and_the_warning():
    lines = audit_lines({"audit": AUDIT})
    assert lines[0] == "- lower bound on epsilon: epsilon >= 4.62 at 95% confidence (delta 1e-05)"
    assert lines[1] == "- example level, white-box: 500 of 500 guesses right about 1000 canaries"
    assert lines[2] == "- accountant's epsilon: 4.00"
    assert lines[-1].startswith("- **the measured lower bound") and lines[-1].endswith("misconfigured or broken**")


def test_a_bound_below_the_claim_has_no_warning_and_a_run_without_audit_no_section():
    assert not any("exceeds" in line for line in audit_lines({"audit": {**AUDIT, "audit_epsilon_lower": 1.2}}))
    assert audit_lines({"final": {}}) == [] and audit_lines(None) == []


def test_both_analyses_are_stated_with_the_stronger_as_the_result():
    both = {
        **AUDIT,
        "audit_epsilon_lower": 1.01,
        "audit_fdp_epsilon_lower": 1.62,
        "audit_gdp_mu_lower": 0.42,
        "audit_epsilon_result": 1.62,
        "audit_result_analysis": "f-DP (Gaussian)",
        "audit_fdp_guesses": 200,
        "audit_fdp_correct": 180,
    }
    lines = audit_lines({"audit": both})
    assert lines[0] == (
        "- lower bound on epsilon: epsilon >= 1.62 at 95% confidence (delta 1e-05, by the f-DP (Gaussian) analysis; "
        "f-DP (Gaussian): 1.62, not mu-GDP below mu = 0.42; epsilon-delta: 1.01)"
    )
    assert "assumes its trade-off curve is Gaussian" in lines[1]
    assert "(f-DP's best count: 180 of 200)" in lines[2]
    assert not any("exceeds" in line for line in lines)  # both below the accountant's 4.00
    assert not any("one-shot" in line for line in lines)  # example level: no canary clients' estimate
    client = {**both, "audit_one_shot_epsilon_estimate": 2.5, "audit_one_shot_mu_estimate": 0.61}
    assert "- one-shot estimate (Andrew et al. 2024; an estimate, not a bound): epsilon ~ 2.50 (mu ~ 0.61)" in (
        audit_lines({"audit": client})
    )


def test_a_secagg_audit_states_its_canary_clients_and_that_no_accountant_claims_anything():
    secagg = {
        **AUDIT,
        "audit_adjacency": "client",
        "audit_canary_norm": 1.0,
        "audit_canary_weight": 359.25,
        "audit_one_shot_epsilon_estimate": 214.3,
        "audit_one_shot_mu_estimate": 16.9,
        "epsilon_client": None,
    }
    del secagg["epsilon_example"]
    lines = audit_lines({"audit": secagg})
    assert lines[1] == (
        "- client level, white-box: 500 of 500 guesses right about 1000 canaries of norm 1 (canary clients of "
        "359.25 examples' weight, carried in the SecAgg+ masked vectors)"
    )
    assert lines[2] == "- accountant's epsilon: none claimed"
    assert any(line.startswith("- one-shot estimate") and "epsilon ~ 214.30" in line for line in lines)
    assert not any("exceeds" in line for line in lines)
