"""A second opinion on every epsilon fedsim reports: Google's `dp-accounting`, fed the same events.

fedsim's DP-SGD epsilon comes from Opacus' RDP or PRV accountant, the central-DP epsilon from Opacus' RDP
accountant. Each must agree with `dp-accounting` (its RDP accountant where fedsim uses RDP, its PLD
accountant where fedsim uses PRV) within a few percent, or be the larger (a looser bound is still a bound).
"""

import threading
from dataclasses import astuple

import pytest
import torch

from clients.defenses.privacy_ledger import ClientPrivacyLedger, LedgerEntry
from clients.defenses.privacy_ledger import epsilon as ledger_epsilon

dp_accounting = pytest.importorskip("dp_accounting")

from central_dp import GLOBAL, bound, dp_config, run_round, shifted, small_step  # noqa: E402
from dp_accounting import ComposedDpEvent, GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent  # noqa: E402
from dp_accounting.pld import PLDAccountant  # noqa: E402
from dp_accounting.rdp import RdpAccountant  # noqa: E402
from dp_training import client, dpsgd, rounds, toy  # noqa: E402

pytestmark = [
    pytest.mark.usefixtures("task_identity"),
    pytest.mark.filterwarnings("ignore:Full backward hook is firing"),
]

AGREEMENT = 0.05  # "within a few percent"


def assert_agrees_or_is_larger(fedsim_epsilon: float, reference: float) -> None:
    """Within AGREEMENT below the second opinion at most; above it by any amount (a looser bound)."""
    assert fedsim_epsilon >= reference * (1 - AGREEMENT), (fedsim_epsilon, reference)


def reference_epsilon(events: list, delta: float, accountant: str) -> float:
    second = RdpAccountant() if accountant == "rdp" else PLDAccountant(value_discretization_interval=1e-4)
    second.compose(ComposedDpEvent(events))
    return float(second.get_epsilon(delta))


# ------------------------------------------------------------------------------------------ DP-SGD


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
@pytest.mark.parametrize(("noise_multiplier", "batch_size", "local_steps"), [(1.1, 4, 5), (0.8, 8, 10)])
def test_dpsgd_epsilon_over_rounds_agrees_with_dp_accounting(
    tmp_path, accountant, noise_multiplier, batch_size, local_steps
):
    model, x, y = toy()
    cfg = client(
        dpsgd(noise_multiplier=noise_multiplier, accountant=accountant), batch_size=batch_size, local_steps=local_steps
    )
    records = rounds(model, x, y, cfg, tmp_path, planned=3)
    rate = batch_size / len(x)
    for server_round, record in enumerate(records, start=1):
        assert record["defense.dpsgd.delta"] == 1e-5
        step = PoissonSampledDpEvent(rate, GaussianDpEvent(noise_multiplier))
        events = [SelfComposedDpEvent(step, local_steps * server_round)]
        reference = reference_epsilon(events, 1e-5, "rdp" if accountant == "rdp" else "pld")
        assert_agrees_or_is_larger(record["defense.dpsgd.epsilon"], reference)


def test_a_resumed_dpsgd_ledger_still_agrees_with_dp_accounting(tmp_path):
    model, x, y = toy()
    cfg = client(dpsgd(noise_multiplier=1.0), batch_size=4, local_steps=5)
    rounds(model, x, y, cfg, tmp_path, planned=3)
    (resumed,) = rounds(model, x, y, cfg, tmp_path, planned=3, run=[3])  # rerun after a kill: counted once
    step = PoissonSampledDpEvent(4 / len(x), GaussianDpEvent(1.0))
    assert_agrees_or_is_larger(
        resumed["defense.dpsgd.epsilon"], reference_epsilon([SelfComposedDpEvent(step, 15)], 1e-5, "rdp")
    )


def test_a_resumed_prv_ledger_at_a_set_delta_agrees_with_dp_accountings_pld(tmp_path):
    model, x, y = toy()
    cfg = client(dpsgd(noise_multiplier=0.9, accountant="prv", delta=1e-6), batch_size=8, local_steps=3)
    rounds(model, x, y, cfg, tmp_path, planned=3)
    resumed = rounds(model, x, y, cfg, tmp_path, planned=3, run=[2, 3])  # --resume reran rounds 2 and 3
    assert resumed[-1]["defense.dpsgd.delta"] == 1e-6 and resumed[-1]["defense.dpsgd.total_steps"] == 9
    step = PoissonSampledDpEvent(8 / len(x), GaussianDpEvent(0.9))
    reference = reference_epsilon([SelfComposedDpEvent(step, 9)], 1e-6, "pld")
    assert_agrees_or_is_larger(resumed[-1]["defense.dpsgd.epsilon"], reference)


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_a_ledger_whose_settings_change_between_rounds_agrees_with_dp_accounting(accountant):
    entries = [LedgerEntry(1, 1.0, 0.1, 5), LedgerEntry(2, 2.0, 0.05, 10), LedgerEntry(3, 1.0, 0.1, 5)]
    events = [
        SelfComposedDpEvent(PoissonSampledDpEvent(rate, GaussianDpEvent(noise)), steps)
        for _, noise, rate, steps in (astuple(entry) for entry in entries)
    ]
    reference = reference_epsilon(events, 1e-5, "rdp" if accountant == "rdp" else "pld")
    assert_agrees_or_is_larger(ledger_epsilon(entries, 1e-5, accountant), reference)


def test_ledger_writers_at_the_same_time_lose_no_round(tmp_path):
    def write(server_round: int) -> None:
        ClientPrivacyLedger(tmp_path).record(LedgerEntry(server_round, 1.0, 0.1, 1))

    writers = [threading.Thread(target=write, args=(server_round,)) for server_round in range(1, 9)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert [entry.round for entry in ClientPrivacyLedger(tmp_path).entries] == list(range(1, 9))
    assert not list(tmp_path.glob(".privacy.json.*.tmp"))  # nothing half-written left behind


# ----------------------------------------------------------------------------------------- central DP


@pytest.mark.parametrize("amplification", [False, True])
@pytest.mark.parametrize("estimator", ["fixed-denominator", "weighted-mean"])
def test_central_dp_fixed_clipping_epsilon_agrees_with_dp_accounting(amplification, estimator):
    config = dp_config(
        num_clients=8,
        fraction_fit=0.5,
        kind="server-fixed",
        noise_multiplier=2.0,
        clipping_norm=1.0,
        estimator=estimator,
        amplification=amplification,
    )
    strategy = bound(config)
    for server_round in (1, 2, 3):
        run_round(strategy, server_round, [small_step() for _ in range(4)], weights=[10, 20, 30, 40])
        row = strategy.round_metrics(server_round)
        # the Gaussian release of one round: noise std z C / m over the estimator's sensitivity
        release = GaussianDpEvent((2.0 * 1.0 / 4) / row["dp_sensitivity"])
        event = PoissonSampledDpEvent(4 / 8, release) if amplification else release
        reference = reference_epsilon([SelfComposedDpEvent(event, server_round)], 1e-5, "rdp")
        assert_agrees_or_is_larger(row["dp_epsilon"], reference)


def test_central_dp_adaptive_clipping_composes_the_update_and_the_count_release_like_dp_accounting():
    config = dp_config(num_clients=20, kind="server-adaptive", noise_multiplier=0.5, clipping_norm=0.2)
    strategy = bound(config)
    states = [shifted({n: torch.ones_like(v) for n, v in GLOBAL.items()}, 0.1 * (p + 1)) for p in range(20)]
    events = []
    for server_round in (1, 2):
        run_round(strategy, server_round, states)
        row = strategy.round_metrics(server_round)
        update = GaussianDpEvent(row["dp_noise_std"] / row["dp_sensitivity"])
        count = GaussianDpEvent(20 / 20)  # clipped_count_stddev defaults to num_sampled / 20; sensitivity 1
        events.append(ComposedDpEvent([update, count]))
        assert_agrees_or_is_larger(row["dp_epsilon"], reference_epsilon(events, 1e-5, "rdp"))
