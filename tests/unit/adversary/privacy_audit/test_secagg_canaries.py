"""Canary clients under SecAgg+: the sampled clients carry them inside the vectors they mask, so they reach the
server only in the weighted sum it unmasks, and the auditor scores them from that sum."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

import fedsim.core.wire as wire
from adversary.privacy_audit.auditor import RunAuditor
from adversary.privacy_audit.canaries import CanaryClients, CarriedCanaries
from adversary.privacy_audit.config import CLIENT
from adversary.taps import ClientReport, tapped_update
from clients.legacy_client import SecAggClient
from fedsim.config import parse_config
from strategies.secagg import SecAggPlusFedAvg

DIMENSION, CANARIES, SEED = 20_000, 200, 7
SIZES = (50, 100, 150)  # the clients' examples: SecAgg+ weighs their vectors by them


class Flat(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(DIMENSION))


def test_the_carriers_slots_add_up_to_every_included_canary_client():
    plan = CanaryClients.draw(30, 500, 2.0, seed=3)
    carried = sum(plan.carried_sum(slot, 4) for slot in range(4))
    assert torch.allclose(carried, plan.inserted_sum())


def test_the_strategy_hands_each_sampled_client_its_slot_only_under_an_audit():
    federation = SimpleNamespace(num_clients=3, fraction_fit=1.0, min_fit_clients=3)
    strategy = SecAggPlusFedAvg(federation, seed=0)
    strategy.bind({partition: 100 + partition for partition in range(3)})
    proxies = SimpleNamespace(all=lambda: {str(100 + p): f"proxy {p}" for p in range(3)})
    plain = strategy.configure_fit(1, None, proxies)
    assert all(set(fitins.config) == {wire.SERVER_ROUND} for _, fitins in plain)
    strategy.canary_weight = 100.0
    audited = strategy.configure_fit(1, None, proxies)
    assert sorted(fitins.config[wire.CANARY_SLOT] for _, fitins in audited) == [0, 1, 2]
    assert {(fitins.config[wire.CANARY_SLOTS], fitins.config[wire.CANARY_WEIGHT]) for _, fitins in audited} == {
        (3, 100.0)
    }


def carrying_client(carried: CarriedCanaries | None) -> SecAggClient:
    return SecAggClient(SimpleNamespace(canary_clients=carried), partition=0)


def test_a_client_adds_its_slot_to_what_it_masks_and_nothing_without_a_slot():
    carried, model = CarriedCanaries(CANARIES, 1.0, SEED), Flat()
    weights = {"w": torch.full((DIMENSION,), 0.5)}
    slot = {wire.SERVER_ROUND: 1, wire.CANARY_SLOT: 1, wire.CANARY_SLOTS: 3, wire.CANARY_WEIGHT: 100.0}
    sent = carrying_client(carried)._with_canary_clients(weights, slot, model, 50)
    expected = 0.5 + 100.0 / 50 * carried.plan(DIMENSION).carried_sum(1, 3)
    assert torch.allclose(sent["w"].double(), expected, atol=1e-6)
    assert carrying_client(carried)._with_canary_clients(weights, {wire.SERVER_ROUND: 1}, model, 50) is weights
    assert carrying_client(None)._with_canary_clients(weights, slot, model, 50) is weights


def secagg_sum(sent: list[torch.Tensor]) -> torch.Tensor:
    """What SecAgg+ releases (up to its quantisation): the weighted mean of what the clients masked."""
    return sum(size * vector for size, vector in zip(SIZES, sent, strict=True)) / sum(SIZES)


def test_the_unmasked_sum_holds_each_canary_client_with_its_weight_and_the_auditor_finds_them():
    carried, model = CarriedCanaries(CANARIES, 1.0, SEED), Flat()
    config = parse_config({"strategy": {"name": "secagg+"}, "adversary": {"privacy_audit": {"canaries": CANARIES}}})
    auditor = RunAuditor(config.adversary.privacy_audit, CLIENT, Flat(), seed=SEED, norm=1.0, delta=1e-5, lr=0.1)
    generator = torch.Generator().manual_seed(0)
    state = torch.zeros(DIMENSION)
    for server_round in (1, 2):
        trained = [state + 0.01 * torch.randn(DIMENSION, generator=generator) for _ in SIZES]  # norm ~1.4 each
        sent = [
            trained[slot] + carried.carried(model, slot, len(SIZES), 100.0, size)["w"].float()
            for slot, size in enumerate(SIZES)
        ]
        released = secagg_sum(sent)
        canaries = 100.0 / sum(SIZES) * carried.plan(DIMENSION).inserted_sum()
        assert torch.allclose(released.double(), secagg_sum(trained).double() + canaries, atol=1e-5)
        behind = [ClientReport(client, size, None) for client, size in enumerate(SIZES)]
        auditor.observe(tapped_update("server", server_round, {"w": state}, {"w": released}, behind, aggregate=True))
        state = released
    result, estimate = auditor.outcome({"w": torch.zeros(DIMENSION)}, {"w": state})
    assert np.array_equal(auditor.included, carried.plan(DIMENSION).included)
    # nothing but the other clients' updates hides a canary client here: every guess is right
    assert result.correct == result.guesses and result.epsilon_lower > 3.0
    assert estimate is not None and estimate.mu > 5.0
