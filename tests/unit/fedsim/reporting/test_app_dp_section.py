"""The report's section on an audited app's DP: per node the mechanism found, the app's own epsilon, the audit's bound
beside it, and every contradicted claim in bold; runs that are not app audits get no such section."""

from __future__ import annotations

from types import SimpleNamespace

from fedsim.reporting.app_dp_section import app_dp_section, claimed_text
from fedsim.reporting.render import Table, render_html


def bound(epsilon: float, claimed: float) -> dict:
    return {
        "client": 0,
        "audit_epsilon_result": epsilon,
        "audit_result_analysis": "epsilon-delta",
        "audit_epsilon_lower": epsilon,
        "audit_fdp_epsilon_lower": 0.0,
        "audit_confidence": 0.95,
        "audit_delta": 1e-5,
        "audit_adjacency": "example",
        "audit_canaries": 100,
        "audit_guesses": 50,
        "audit_correct": 40,
        "epsilon_example": claimed,
    }


def app_audit(claimed: float, measured: float) -> SimpleNamespace:
    summary = {
        "app_dp": {
            "mechanisms": {"opacus-dpsgd": {"0": {"noise_multiplier": 1.0, "max_grad_norm": 1.0}}},
            "epsilon_claims": {"0": {"epsilon": claimed}},
            "opacus_accountant": {"0": {"epsilon": claimed, "delta": 1e-5, "accountant_steps": 12}},
            "contradicted": [],
            "unadapted": None,
            "privacy_audit": {"0": bound(measured, claimed)},
        }
    }
    return SimpleNamespace(name="audit-opacus", labels={}, summary=summary)


def section_of(*runs):
    return app_dp_section(SimpleNamespace(runs={run.name + str(i): run for i, run in enumerate(runs)}))


def test_each_node_shows_its_dp_the_apps_own_epsilon_and_the_bound_beside_it():
    section = section_of(app_audit(claimed=3.58, measured=0.4))
    (table,) = [block for block in section.blocks if isinstance(block, Table)]
    row = table.frame.iloc[0]
    assert (row["node"], row["DP found"]) == ("0", "opacus-dpsgd")
    assert row["settings"] == "noise_multiplier 1, max_grad_norm 1"
    assert row["app's own epsilon"] == "epsilon 3.58 (Opacus' accountant: delta 1e-05, 12 steps)"
    assert row["audit lower bound (example level)"] == "0.40 (epsilon-delta) at 95%, delta 1e-05"
    assert row["claim"] == "not contradicted"
    assert "<strong>" not in render_html("report", [section])


def test_a_claim_below_the_measured_bound_is_said_in_bold():
    section = section_of(app_audit(claimed=0.2, measured=1.5))
    assert "<strong>audit-opacus: the measured lower bound on epsilon (1.50" in render_html("report", [section])


def test_the_dp_the_attacks_were_adapted_to_before_the_run_is_said_with_where_it_was_found():
    audited = app_audit(claimed=1.0, measured=0.1)
    line = "the attacks adapt to client defense dpsgd (noise_multiplier 1, max_grad_norm 1), found before the run by x"
    audited.summary["app_dp"]["attacks_adapted_to"] = [{"defense": {"name": "dpsgd"}, "line": line}]
    assert f"audit-opacus: {line}." in render_html("report", [section_of(audited)])


def test_a_client_level_bound_is_said_beside_the_epsilon_the_mechanism_stands_for_and_in_bold_where_above_it():
    audited = app_audit(claimed=1.0, measured=0.1)
    client = {**bound(1.2, claimed=0.0), "audit_adjacency": "client", "epsilon_client": 0.5}
    client.pop("epsilon_example")
    client |= {"mechanism": "flower-localdp", "claim": "the epsilon LocalDpMod states", "audit_gdp_mu_lower": 0.4}
    audited.summary["app_dp"]["privacy_audit_client"] = [client]
    html = render_html("report", [section_of(audited)])
    assert "audit-opacus: privacy audit, flower-localdp (client level, one release" in html
    assert "beside the epsilon LocalDpMod states: 0.5." in html
    assert "<strong>audit-opacus: the app&#x27;s flower-localdp claim is contradicted" in html.replace("'", "&#x27;")


def test_a_bound_without_a_claim_beside_it_checks_none():
    audited = app_audit(claimed=1.0, measured=1.9)
    audited.summary["app_dp"]["privacy_audit"]["0"]["epsilon_example"] = None
    (table,) = [block for block in section_of(audited).blocks if isinstance(block, Table)]
    assert table.frame.iloc[0]["claim"] == "none to check"


def test_runs_that_are_not_app_audits_have_no_such_section_and_no_claim():
    assert section_of(SimpleNamespace(name="run", labels={}, summary={"final": {}})) is None
    assert claimed_text({"epsilon_claims": {}}) is None
    assert claimed_text({"epsilon_claims": {"1": {"epsilon": 4.391}}}) == "the app claims node 1: 4.39"
