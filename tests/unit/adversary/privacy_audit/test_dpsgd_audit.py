"""DP-SGD audited white-box in process: a correct run stays below its accountant's epsilon, a broken one does not."""

from __future__ import annotations

import pytest

from clients.defenses.dpsgd import NOISE_OFF_FOR_TESTS
from tests.helpers.privacy_audit_training import audited_dpsgd

# Opacus' hook on the first layer, whose input needs no gradient; clients.defenses.dpsgd silences it too
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing")


def test_the_bound_stays_below_epsilon_4_over_three_seeds(tmp_path):
    for seed in range(3):
        result, epsilon = audited_dpsgd(seed, tmp_path / str(seed))
        assert epsilon == pytest.approx(4.0, abs=0.05)
        assert 0 < result.epsilon_lower < 4.0  # measured, and never above the guarantee
        assert 0 < result.fdp_epsilon_lower < 4.0  # nor is the f-DP analysis of the same guesses


def test_dpsgd_without_its_noise_is_caught(tmp_path, monkeypatch):
    monkeypatch.setenv(NOISE_OFF_FOR_TESTS, "1")
    result, epsilon = audited_dpsgd(0, tmp_path)
    assert epsilon == pytest.approx(4.0, abs=0.05)  # the ledger still claims the configured noise
    assert result.epsilon_lower > 4.0
    assert result.epsilon_result >= result.epsilon_lower
