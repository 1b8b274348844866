"""`strategy.dp`: Flower's central-DP wrappers around FedAvg, the client clipping mod, taps and epsilon."""

import math

import numpy as np
import pytest
import torch
from central_dp import GLOBAL, NUM_CLIENTS, bound, dp_config, reply, run_round, shifted, small_step
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp.mod import fixedclipping_mod
from tiny_configs import tiny_config

from adversary.taps import AGGREGATE
from fedsim.config import ConfigError, parse_config
from fedsim.engine.assembly import strategy_of
from strategies.base import MessageStrategy
from strategies.dp import DP_MECHANISMS, client_mods, effective_noise_multiplier, sensitivity

pytestmark = pytest.mark.usefixtures("task_identity")  # messages built outside a Flower run (conftest.py)


def flat_norm(update: dict[str, torch.Tensor]) -> float:
    return float(torch.sqrt(sum((value.double() ** 2).sum() for value in update.values())))


# ------------------------------------------------------------------------------------------ config


@pytest.mark.parametrize(
    ("dp", "starts"),
    [
        ({"noise_multiplier": -0.5}, "strategy.dp.noise_multiplier = -0.5: "),
        ({"noise_multiplier": "lots"}, "strategy.dp.noise_multiplier = 'lots': "),
        ({"clipping_norm": 0}, "strategy.dp.clipping_norm = 0: "),
        ({"clipping_norm": -1.0}, "strategy.dp.clipping_norm = -1.0: "),
        (
            {"kind": "client-fixd"},
            "strategy.dp.kind = 'client-fixd': unknown dp mechanism 'client-fixd' (did you mean 'client-fixed'?)",
        ),
        ({"num_sampled_clients": 9}, "strategy.dp.num_sampled_clients = 9: must be <= federation.num_clients (4)"),
        ({"delta": 1.0}, "strategy.dp.delta = 1.0: "),
        ({"estimator": "median"}, "strategy.dp.estimator = 'median': "),
        ({"estimator": "weighted-mean", "max_weight": 10}, "strategy.dp.max_weight = 10"),
        ({"kind": "server-fixed", "clip_norm_lr": 0.1}, "strategy.dp.clip_norm_lr = 0.1: only adaptive kinds"),
        (
            {"kind": "client-adaptive", "noise_multiplier": 1.0},
            "strategy.dp.noise_multiplier = 1.0: adaptive clipping needs it < 2 * clipped_count_stddev",
        ),
    ],
)
def test_bad_dp_settings_fail_in_one_line_naming_the_key(dp, starts):
    with pytest.raises(ConfigError) as error:
        dp_config(**dp)
    message = str(error.value)
    assert message.startswith(starts) and "\n" not in message


def test_allowed_ranges_are_named():
    with pytest.raises(ConfigError, match=r"noise_multiplier = -1: .*greater than or equal to 0"):
        dp_config(noise_multiplier=-1)
    with pytest.raises(ConfigError, match=r"allowed: client-adaptive, client-fixed, server-adaptive, server-fixed"):
        dp_config(kind="gaussian")


def test_dp_is_off_unless_configured_and_the_sample_size_is_derived():
    assert parse_config({}).strategy.dp is None
    assert strategy_of(parse_config({})).round_metrics(1) == {}
    config = dp_config(num_clients=10, fraction_fit=0.3)
    assert config.strategy.dp.sampled_clients(config.federation) == 3
    assert bound(config).num_sampled_clients == 3
    config = parse_config(
        {"federation": {"num_clients": 10, "fraction_fit": 0.1, "min_fit_clients": 4}, "strategy": {"dp": {}}}
    )
    assert bound(config).num_sampled_clients == 4


def test_every_kind_is_registered_with_the_client_mod_it_needs():
    assert DP_MECHANISMS.names() == ["client-adaptive", "client-fixed", "server-adaptive", "server-fixed"]
    assert client_mods(parse_config({}).strategy.dp) == []
    assert client_mods(dp_config(kind="server-fixed").strategy.dp) == []
    assert client_mods(dp_config(kind="client-fixed").strategy.dp) == [fixedclipping_mod]


def test_fedsim_list_shows_the_mechanisms(capsys):
    from fedsim.cli import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "strategy.dp.kind" in out and "client-fixed" in out and "server-adaptive" in out


# -------------------------------------------------------------------------------- server clipping


def test_the_wrapper_forwards_the_strategy_contract_to_fedavg():
    strategy = bound(dp_config(num_clients=10, fraction_fit=0.3))
    fedavg = strategy.strategy.strategy  # Flower's wrapper -> the fixed-denominator estimator -> FedAvg
    assert fedavg.node_of_partition[3] == 103  # bind reached the wrapped FedAvg
    assert strategy.sample_partitions(2) == fedavg.sample_partitions(2)
    assert len(strategy.sample_partitions(2)) == 3
    assert isinstance(strategy, MessageStrategy) and strategy.protocol == "message"


def test_server_side_clipping_without_noise_averages_the_clipped_updates():
    strategy = bound(dp_config(kind="server-fixed", noise_multiplier=0.0, clipping_norm=1.0))
    generator = torch.Generator().manual_seed(0)
    directions = [{name: torch.randn(v.shape, generator=generator) for name, v in GLOBAL.items()} for _ in range(4)]
    scales = [0.05, 0.5, 3.0, 20.0]  # the first updates are inside the ball, the last ones far outside
    _, aggregate = run_round(strategy, 1, [shifted(d, s) for d, s in zip(directions, scales)])

    expected = {name: torch.zeros_like(value) for name, value in GLOBAL.items()}
    for direction, scale in zip(directions, scales):
        update = {name: scale * direction[name] for name in GLOBAL}
        factor = min(1.0, 1.0 / flat_norm(update))  # one norm over all arrays
        for name in GLOBAL:
            expected[name] += factor * update[name] / 4
    for name in GLOBAL:
        assert torch.allclose(aggregate[name], GLOBAL[name] + expected[name], atol=1e-6)
    row = strategy.round_metrics(1)
    assert row["dp_noise_std"] == 0.0 and row["dp_epsilon"] == math.inf


LARGE = {"w": torch.zeros(200, 200)}


def noise_of(strategy, server_round: int) -> np.ndarray:
    """The noise on an aggregate of equal small updates (norm 0.02, inside the clipping ball).

    Not zero updates: Flower's clipping divides by the update's norm (ZeroDivisionError in flwr 1.41).
    """
    states = [{"w": LARGE["w"] + 1e-4} for _ in range(NUM_CLIENTS)]
    _, aggregate = run_round(strategy, server_round, states, start=LARGE)
    return (aggregate["w"] - LARGE["w"] - 1e-4).numpy().ravel()


def test_the_noise_std_is_sigma_times_clip_over_the_sampled_clients():
    strategy = bound(dp_config(kind="server-fixed", noise_multiplier=2.0, clipping_norm=0.5))
    noise = noise_of(strategy, 1)
    expected = 2.0 * 0.5 / NUM_CLIENTS  # 0.25; sigma*clip would be 1.0, sigma*clip/m^2 0.0625
    assert abs(noise.std() - expected) < 0.03 * expected  # 40,000 draws: the std's own error is ~0.4%
    assert abs(noise.mean()) < 0.01
    assert strategy.round_metrics(1)["dp_noise_std"] == pytest.approx(expected)
    again = bound(dp_config(kind="server-fixed", noise_multiplier=2.0, clipping_norm=0.5))
    assert np.array_equal(noise_of(again, 1), noise)  # seeded by (seed, round): a resumed run repeats it
    assert not np.array_equal(noise_of(again, 2), noise)


# -------------------------------------------------------------------------------- client clipping


def test_the_client_mod_clips_what_a_client_sends(tmp_path):
    from clients.client_app import build_client_app
    from fedsim.engine.assembly import client_spec_of, federation_of, run_model_of

    def client_reply(dp):
        config = tiny_config(
            seed=2,
            data={"max_train_samples": 200, "normalize": "global"},
            model={"activation": "relu", "init": "default"},
            federation={"rounds": 3},
            client={"batch_size": 8, "local_steps": 2},
            output={"ground_truth": False},
            **({"strategy": {"dp": dp}} if dp else {}),
        )
        federation = federation_of(config)
        dataset = federation.dataset
        spec = client_spec_of(
            config,
            tmp_path / str(bool(dp)),
            partitions=federation.partitions,
            stats=federation.client_stats,
            num_classes=dataset.num_classes,
            channels=dataset.channels,
            image_size=dataset.image_size,
        )
        spec.run_dir.mkdir()
        model = run_model_of(config, dataset, seed=0, with_weights=True)
        start = {name: value.detach().clone() for name, value in model.state_dict().items()}
        strategy = strategy_of(config)
        strategy.bind({0: 100, 1: 101})
        message = next(iter(strategy.configure_train(1, ArrayRecord(start), ConfigRecord(), None)))
        context = Context(run_id=1, node_id=100, node_config={"partition-id": 0}, state=RecordDict(), run_config={})
        sent = build_client_app(spec)(message, context)
        assert not sent.has_error(), sent.error if sent.has_error() else None
        state = sent.content["arrays"].to_torch_state_dict()
        return {name: state[name] - start[name] for name in start}

    free = client_reply(None)
    clipped = client_reply({"kind": "client-fixed", "clipping_norm": 1e-3})
    assert flat_norm(free) > 1e-2
    assert flat_norm(clipped) == pytest.approx(1e-3, rel=1e-3)
    for name in free:  # the same update, scaled down onto the ball
        assert torch.allclose(clipped[name], free[name] * (1e-3 / flat_norm(free)), atol=1e-7)


# ------------------------------------------------------------------------------------------- taps


def clipping_client(update: dict[str, torch.Tensor], partition: int):
    """A client behind Flower's fixedclipping_mod that always sends ``global + update``."""

    def train(message: Message, context: Context) -> Message:
        received = message.content["arrays"].to_torch_state_dict()
        return reply(message, {name: received[name] + update[name] for name in received}, partition)

    context = Context(run_id=1, node_id=100 + partition, node_config={}, state=RecordDict(), run_config={})
    return lambda message: fixedclipping_mod(message, context, train)


def test_the_server_tap_sees_clipped_replies_then_the_noised_aggregate():
    seen = []
    strategy = bound(dp_config(kind="client-fixed", noise_multiplier=1.0, clipping_norm=0.5), tap=seen.append)
    generator = torch.Generator().manual_seed(1)
    updates = [{name: 3.0 * torch.randn(v.shape, generator=generator) for name, v in GLOBAL.items()} for _ in range(4)]
    messages = list(strategy.configure_train(1, ArrayRecord(GLOBAL), ConfigRecord(), None))
    replies = [clipping_client(updates[p], p)(message) for p, message in enumerate(messages)]
    sent = [r.content["arrays"].to_torch_state_dict() for r in replies]
    aggregated, _ = strategy.aggregate_train(1, replies)

    assert [u.source for u in seen] == ["client:0", "client:1", "client:2", "client:3", AGGREGATE]
    assert all(u.tap == "server" and u.round == 1 for u in seen)
    for update, state in zip(seen[:4], sent):  # as received: clipped by the clients, no noise
        assert all(torch.equal(update.observed_state[name], state[name]) for name in GLOBAL)
        assert flat_norm({n: update.observed_state[n] - GLOBAL[n] for n in GLOBAL}) == pytest.approx(0.5, rel=1e-5)
    released = aggregated.to_torch_state_dict()
    mean = {name: sum(state[name] for state in sent) / 4 for name in GLOBAL}
    assert all(torch.equal(seen[-1].observed_state[name], released[name]) for name in GLOBAL)  # after the noise
    assert not torch.allclose(released["w"], mean["w"], atol=1e-3)  # std 1.0 * 0.5 / 4


def test_under_server_side_clipping_the_server_tap_sees_the_raw_replies():
    seen = []
    strategy = bound(dp_config(kind="server-fixed", noise_multiplier=0.0, clipping_norm=0.5), tap=seen.append)
    states = [shifted({n: torch.ones_like(v) for n, v in GLOBAL.items()}, 10.0) for _ in range(4)]
    run_round(strategy, 1, states)
    assert torch.equal(seen[0].observed_state["w"], states[0]["w"])  # unclipped: what the server received
    assert flat_norm({n: seen[-1].observed_state[n] - GLOBAL[n] for n in GLOBAL}) == pytest.approx(0.5, rel=1e-5)


def test_round_metrics_pass_through_the_tap():
    strategy = bound(dp_config(kind="server-fixed", noise_multiplier=1.0), tap=lambda update: None)
    run_round(strategy, 1, [small_step() for _ in range(4)])
    assert strategy.round_metrics(1)["dp_mechanism"] == "server-fixed"


# ---------------------------------------------------------------------------------------- epsilon


def test_the_sensitivity_is_that_of_the_estimator_under_add_remove_one_client():
    assert sensitivity("fixed-denominator", 1.0, 4) == pytest.approx(0.25)  # one of m terms, each <= C / m
    assert sensitivity("weighted-mean", 1.0, 4) == pytest.approx(2.0)  # a reported count can take any share


def test_effective_noise_multiplier_divides_by_the_sensitivity_and_composes_the_count_noise():
    assert effective_noise_multiplier(0.25, 0.25) == pytest.approx(1.0)
    assert effective_noise_multiplier(0.25, 2.0) == pytest.approx(0.125)
    assert effective_noise_multiplier(0.25, 0.25, count_noise_std=1.0) == pytest.approx(2**-0.5)
    assert effective_noise_multiplier(0.0, 0.25) == 0.0


def test_the_weighted_mean_sensitivity_is_attained_by_a_client_reporting_a_huge_count():
    # Neighbouring federations: three clients at one side of the clipping ball, and the same plus one client
    # at the other side reporting a count that dwarfs theirs: the mean moves by nearly 2C, so C * share is no bound.
    clip = 1.0
    others = [np.array([-clip, 0.0])] * 3
    mean = sum(others) / 3
    added = (3 * 10 * mean + 10**9 * np.array([clip, 0.0])) / (3 * 10 + 10**9)
    assert np.linalg.norm(added - mean) == pytest.approx(2 * clip, rel=1e-6)
    assert np.linalg.norm(added - mean) <= sensitivity("weighted-mean", clip, 3)


def test_epsilon_grows_per_release_and_matches_opacus():
    from opacus.accountants import RDPAccountant

    config = dp_config(
        num_clients=8, fraction_fit=0.5, kind="server-fixed", noise_multiplier=1.2, delta=1e-3, amplification=True
    )
    strategy = bound(config)
    epsilons = []
    for server_round in (1, 2, 3):
        run_round(strategy, server_round, [small_step() for _ in range(4)])
        row = strategy.round_metrics(server_round)
        assert row["dp_noise_multiplier"] == pytest.approx(1.2) and row["dp_sample_rate"] == 0.5
        assert row["dp_delta"] == 1e-3 and row["dp_accountant"] == "opacus-rdp"
        assert row["dp_adjacency"] == "add/remove one client" and row["dp_estimator"] == "fixed-denominator"
        assert row["dp_sensitivity"] == pytest.approx(1.0 / 4) and row["dp_amplification"] is True
        epsilons.append(row["dp_epsilon"])
    reference = RDPAccountant()
    for _ in range(3):
        reference.step(noise_multiplier=1.2, sample_rate=0.5)
    assert 0 < epsilons[0] < epsilons[1] < epsilons[2] == pytest.approx(reference.get_epsilon(1e-3))
    without = bound(dp_config(num_clients=8, fraction_fit=0.5, noise_multiplier=1.2, delta=1e-3))
    run_round(without, 1, [small_step() for _ in range(4)])
    assert without.round_metrics(1)["dp_sample_rate"] == 1.0  # amplification is off unless asked for
    assert without.round_metrics(1)["dp_epsilon"] > epsilons[0]


def test_delta_defaults_to_1e_5_and_amplification_to_off():
    settings = dp_config().strategy.dp
    assert settings.delta == 1e-5 and settings.amplification is False and settings.estimator == "fixed-denominator"
    assert bound(dp_config()).ledger.delta == 1e-5


def test_under_a_fixed_denominator_unequal_counts_neither_change_the_accounting_nor_a_clients_influence():
    strategy = bound(dp_config(kind="server-fixed", noise_multiplier=0.0, max_weight=20))
    steps = [shifted({n: torch.ones_like(v) for n, v in GLOBAL.items()}, 0.01 * (p + 1)) for p in range(4)]
    _, aggregate = run_round(strategy, 1, steps, weights=[10, 10, 10, 1000])
    weights = [0.5, 0.5, 0.5, 1.0]  # min(n, 20) / 20: the huge count is capped at the public bound
    for name in GLOBAL:
        expected = GLOBAL[name] + sum(w * (step[name] - GLOBAL[name]) for w, step in zip(weights, steps)) / 4
        assert torch.allclose(aggregate[name], expected, atol=1e-6)
    noisy = bound(dp_config(kind="server-fixed", noise_multiplier=1.0))
    run_round(noisy, 1, [small_step() for _ in range(4)], weights=[10, 10, 10, 30])
    assert noisy.round_metrics(1)["dp_noise_multiplier"] == pytest.approx(1.0)


def test_the_weighted_mean_estimator_accounts_with_twice_the_clipping_norm():
    strategy = bound(dp_config(kind="server-fixed", noise_multiplier=1.0, estimator="weighted-mean"))
    run_round(strategy, 1, [small_step() for _ in range(4)], weights=[10, 10, 10, 30])
    row = strategy.round_metrics(1)
    assert row["dp_sensitivity"] == pytest.approx(2.0)
    assert row["dp_noise_multiplier"] == pytest.approx((1.0 * 1.0 / 4) / 2.0)


def test_a_resumed_run_continues_the_epsilon_and_the_adaptive_norm():
    def config():
        return dp_config(
            num_clients=20, fraction_fit=1.0, kind="server-adaptive", noise_multiplier=0.5, clipping_norm=0.2
        )

    states = [shifted({n: torch.ones_like(v) for n, v in GLOBAL.items()}, 0.1 * (p + 1)) for p in range(20)]
    whole = bound(config())
    rows = []
    for server_round in (1, 2, 3):
        _, aggregate = run_round(whole, server_round, states)
        rows.append({"event": "eval", "round": server_round, **whole.round_metrics(server_round)})
    resumed = strategy_of(config(), history=rows[:2])
    resumed.bind({partition: 100 + partition for partition in range(20)})
    _, again = run_round(resumed, 3, states)
    continued = resumed.round_metrics(3)
    for key in ("dp_clipping_norm", "dp_next_clipping_norm", "dp_noise_std", "dp_noise_multiplier", "dp_epsilon"):
        assert continued[key] == pytest.approx(rows[2][key], rel=1e-9), key
    assert rows[0]["dp_next_clipping_norm"] != 0.2  # the bound moved, and the resumed run took it over
    assert torch.equal(again["w"], aggregate["w"])
