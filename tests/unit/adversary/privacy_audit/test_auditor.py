"""The run's auditor: canary clients inside the DP aggregate before its noise, scored from the tapped aggregates;
the row's fields and the one warning line."""

from __future__ import annotations

import math

import pytest
import torch
from central_dp import reply
from flwr.app import ArrayRecord, ConfigRecord
from torch import nn

from adversary.privacy_audit.auditor import RunAuditor, audit_fields, audit_warning
from adversary.privacy_audit.bound import AuditResult
from adversary.privacy_audit.canaries import ExampleCanaries
from adversary.privacy_audit.config import CLIENT, audit_level, gaussian_mechanism
from adversary.taps import StrategyTap
from fedsim.config import ConfigError, parse_config
from fedsim.engine.assembly import strategy_of

pytestmark = pytest.mark.usefixtures("task_identity")  # messages built outside a Flower run (conftest.py)

CLIENTS, DIMENSION = 4, 20_000  # d >> canaries: random directions are nearly orthogonal


class Flat(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(DIMENSION))


def audited_rounds(noise_multiplier: float, rounds: int = 3) -> tuple[RunAuditor, list[torch.Tensor]]:
    """Central DP (server-side fixed clipping, C = 1) over 4 clients plus 200 canary clients, tapped as a server."""
    config = parse_config(
        {
            "seed": 5,
            "federation": {"num_clients": CLIENTS},
            "strategy": {"dp": {"noise_multiplier": noise_multiplier, "clipping_norm": 1.0}},
            "adversary": {"privacy_audit": {"canaries": 200}},
        }
    )
    strategy = strategy_of(config)
    auditor = RunAuditor(config.adversary.privacy_audit, CLIENT, Flat(), seed=1, norm=1.0, delta=1e-5, lr=0.1)
    state = {"w": torch.zeros(DIMENSION)}
    strategy.strategy.inserted = auditor.inserted_updates(state)  # what fedsim.engine.privacy_audit does
    tapped = StrategyTap(strategy, auditor.observe)
    tapped.bind({partition: 100 + partition for partition in range(CLIENTS)})
    released = []
    for server_round in range(1, rounds + 1):
        messages = list(tapped.configure_train(server_round, ArrayRecord(state), ConfigRecord(), None))
        step = {"w": state["w"] + 0.001}  # every client's update (norm 0.14): inside the clipping ball
        replies = [reply(message, step, partition) for partition, message in enumerate(messages)]
        aggregated, _ = tapped.aggregate_train(server_round, replies)
        released.append(aggregated.to_torch_state_dict()["w"] - state["w"])
        state = aggregated.to_torch_state_dict()
    return auditor, released


def test_canary_clients_join_the_clipped_sum_before_the_noise():
    auditor, released = audited_rounds(noise_multiplier=0.0, rounds=1)
    inserted = torch.from_numpy(auditor.inserted_updates({"w": torch.zeros(DIMENSION)})["w"])
    # fixed denominator: (4 client updates + the included canaries' C u_j) / 4, and no noise
    assert torch.allclose(released[0].double(), (4 * 0.001 + inserted) / CLIENTS, atol=1e-5)
    assert auditor.per_round.keys() == {1}


def test_canary_clients_are_found_without_noise_and_hidden_by_it():
    exposed, _ = audited_rounds(noise_multiplier=0.0)
    final = {"w": torch.zeros(DIMENSION)}
    assert exposed.result(final, final).epsilon_lower > 2.0
    hidden, _ = audited_rounds(noise_multiplier=20.0)
    assert hidden.result(final, final).epsilon_lower < 0.5


def test_client_level_carries_andrew_et_al_s_estimate_beside_the_bounds():
    auditor, _ = audited_rounds(noise_multiplier=1.0)
    final = {"w": torch.zeros(DIMENSION)}
    result, estimate = auditor.outcome(final, final)
    assert estimate is not None and estimate.epsilon > 0 and estimate.mu > 0
    fields = audit_fields(result, CLIENT, "white-box", 8.0, estimate)
    assert fields["audit_one_shot_epsilon_estimate"] == estimate.epsilon
    assert fields["audit_epsilon_result"] == max(result.epsilon_lower, result.fdp_epsilon_lower)
    assert "audit_one_shot_epsilon_estimate" not in audit_fields(result, "example", "white-box", 8.0)


def test_the_row_names_the_accountant_epsilon_by_adjacency_and_warns_only_above_it():
    result = AuditResult(4.6, 0.95, 1e-5, 1000, 503, 500, 500)
    fields = audit_fields(result, "example", "white-box", 4.0)
    assert fields["epsilon_example"] == 4.0 and fields["audit_epsilon_lower"] == 4.6
    assert fields["audit_adjacency"] == "example" and fields["audit_delta"] == 1e-5
    warning = audit_warning(fields)
    assert warning.startswith("the measured lower bound on epsilon (4.60 at 95% confidence, example level) exceeds")
    assert warning.endswith("accountant's epsilon (4.00): DP is misconfigured or broken") and "\n" not in warning
    assert audit_warning(audit_fields(result, "client", "white-box", 8.0)) is None
    assert "epsilon_client" in audit_fields(result, "client", "white-box", 8.0)
    assert audit_warning(audit_fields(result, "example", "white-box", None)) is None  # nothing claimed
    assert audit_warning(audit_fields(result, "example", "white-box", math.inf)) is None  # no guarantee claimed


def test_the_stronger_analysis_is_the_result_and_a_gaussian_excess_warns_with_its_assumption():
    result = AuditResult(3.5, 0.95, 1e-5, 1000, 503, 500, 480, gdp_mu_lower=1.2, fdp_epsilon_lower=4.8)
    fields = audit_fields(result, "example", "white-box", 4.0)
    assert fields["audit_epsilon_result"] == 4.8 and fields["audit_result_analysis"] == "f-DP (Gaussian)"
    assert fields["audit_epsilon_lower"] == 3.5 and fields["audit_gdp_mu_lower"] == 1.2
    warning = audit_warning(fields)
    assert warning.startswith("the f-DP (Gaussian) lower bound on epsilon (4.80")
    assert warning.endswith("or the mechanism's trade-off curve is not Gaussian")
    weaker = AuditResult(3.5, 0.95, 1e-5, 1000, 503, 500, 480, gdp_mu_lower=0.5, fdp_epsilon_lower=2.0)
    assert audit_fields(weaker, "example", "white-box", 4.0)["audit_result_analysis"] == "epsilon-delta"


def test_without_a_gaussian_mechanism_the_result_is_the_epsilon_delta_bound():
    result = AuditResult(3.5, 0.95, 1e-5, 1000, 503, 500, 480, gdp_mu_lower=1.2, fdp_epsilon_lower=4.8)
    fields = audit_fields(result, "client", "white-box", None, gaussian=False)
    assert (fields["audit_epsilon_result"], fields["audit_result_analysis"]) == (3.5, "epsilon-delta")
    assert fields["audit_fdp_epsilon_lower"] == 4.8  # still reported, beside it


@pytest.mark.parametrize(
    ("raw", "gaussian"),
    [
        ({"strategy": {"dp": {}}}, True),
        ({"strategy": {"name": "secagg+"}}, False),
        ({"client": {"defenses": [{"name": "dpsgd", "noise_multiplier": 1.0}]}}, True),
        ({"client": {"defenses": [{"name": "prune", "ratio": 0.9}]}}, False),
        (
            {"strategy": {"name": "secagg+"}, "client": {"defenses": [{"name": "dpsgd", "noise_multiplier": 1.0}]}},
            False,
        ),  # not client-level DP
    ],
)
def test_the_mechanisms_that_claim_gaussian_noise_are_central_dp_and_dpsgd_at_their_own_level(raw, gaussian):
    config = parse_config({**raw, "adversary": {"privacy_audit": {}}})
    level = audit_level(config.strategy.dp, config.strategy.secagg)
    assert gaussian_mechanism(config.strategy.dp, config.client.defenses, level) is gaussian


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"federation": {"num_clients": 2}, "adversary": {"privacy_audit": {"host": 2}}},
            "adversary.privacy_audit.host = 2: must be < federation.num_clients (2)",
        ),
        (
            {"strategy": {"dp": {"estimator": "weighted-mean"}}, "adversary": {"privacy_audit": {}}},
            "canary clients need a fixed clipping norm and the fixed-denominator estimator",
        ),
        ({"adversary": {"privacy_audit": {"confidence": 1.0}}}, "adversary.privacy_audit.confidence = 1.0"),
        (
            {"strategy": {"name": "secagg+"}, "adversary": {"privacy_audit": {"threat_model": "black-box"}}},
            "under strategy.dp or secagg+ (client level) use white-box or final-model",
        ),
        (
            {"adversary": {"privacy_audit": {}, "tap": "server", "server": "malicious"}},
            "adversary.privacy_audit with adversary.server = malicious",
        ),
        (
            {"strategy": {"dp": {}}, "adversary": {"privacy_audit": {"threat_model": "black-box"}}},
            "canary examples audit example-level DP; under strategy.dp or secagg+ (client level) use white-box",
        ),
        (
            {"adversary": {"privacy_audit": {"threat_model": "black-box"}, "attacks": ["dlg"]}},
            "audit black-box in a run without adversary.attacks",
        ),
        ({"adversary": {"privacy_audit": {"threat_model": "grey"}}}, "adversary.privacy_audit.threat_model = 'grey'"),
    ],
)
def test_bad_audit_settings_fail_in_one_line(raw, message):
    with pytest.raises(ConfigError) as error:
        parse_config(raw)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_audit_is_off_by_default():
    assert parse_config({}).adversary.privacy_audit is None


def test_black_box_scores_are_minus_the_final_model_loss_on_the_canary_examples():
    images, labels = torch.randn(30, 1, 2, 2), torch.arange(30) % 3
    plan = ExampleCanaries(20, 0.0, host=0, seed=4, examples=True)
    examples = plan.example_set(images, labels, 3)
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    config = parse_config(
        {"adversary": {"privacy_audit": {"threat_model": "black-box", "canaries": 20}}}
    ).adversary.privacy_audit
    auditor = RunAuditor(config, "example", model, seed=4, norm=1.0, delta=1e-5, lr=0.1, examples=examples)
    trained = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))  # the final model, as the run's last checkpoint holds it
    final = trained.state_dict()
    expected = -nn.functional.cross_entropy(trained(examples.x), examples.y, reduction="none").detach().numpy()
    assert auditor.scores(model.state_dict(), final) == pytest.approx(expected.astype(float), rel=1e-5)
    assert (auditor.included == examples.included).all() and plan.for_round(model, 0, 1, 0.5) is None


def test_a_resumed_audit_keeps_the_scores_of_committed_rounds_only():
    auditor, _ = audited_rounds(noise_multiplier=1.0, rounds=3)
    saved = auditor.state()
    resumed, _ = audited_rounds(noise_multiplier=1.0, rounds=0)
    resumed.restore(saved, committed=2)  # round 3 was played but not committed: it will be played again
    assert sorted(resumed.per_round) == [1, 2]
    assert resumed.per_round[2] == auditor.per_round[2]
