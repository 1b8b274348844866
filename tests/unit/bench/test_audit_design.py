"""The idealised Gaussian mechanism of the audit's design bench: its mu, its scores' separation, and a design's
bounds below the truth and below the design's ceiling."""

from __future__ import annotations

import numpy as np
import pytest

from adversary.privacy_audit.fdp import gdp_epsilon
from bench.audit_design import Design, audit_design, gaussian_scores, gdp_mu, separation_mu


def test_gdp_mu_inverts_the_gaussian_epsilon():
    assert gdp_epsilon(gdp_mu(4.0, 1e-5), 1e-5) == pytest.approx(4.0, abs=1e-6)


def test_the_separation_of_gaussian_scores_is_their_mu():
    scores, included = gaussian_scores(0.8, 50_000, np.random.default_rng(0))
    assert separation_mu(scores, included) == pytest.approx(0.8, abs=0.03)


def test_a_design_stays_below_the_true_epsilon_and_its_ceiling():
    row = audit_design(Design("small", 1000), 4.0, 1e-5, seeds=2)
    for run in row["runs"]:
        assert 0 < run["epsilon_delta"] < 4.0 and 0 < run["fdp"] < 4.0
    assert row["ceiling_epsilon_delta"] > 4.0 and row["ceiling_fdp"] > row["ceiling_epsilon_delta"]
    halved = audit_design(Design("small", 1000, norm=0.5), 4.0, 1e-5, seeds=2)
    assert np.mean([run["fdp"] for run in halved["runs"]]) < np.mean([run["fdp"] for run in row["runs"]])
