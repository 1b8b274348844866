"""FedAvg's client sampling: reproducible per (seed, round), independent of node ids."""

from fedsim.config import FederationConfig
from strategies import STRATEGIES


def strategy(num_clients=10, fraction_fit=0.3, min_fit_clients=1, seed=0):
    federation = FederationConfig(num_clients=num_clients, fraction_fit=fraction_fit, min_fit_clients=min_fit_clients)
    built = STRATEGIES.get("fedavg")(federation, seed)
    built.bind({partition: 1000 + 7 * partition for partition in range(num_clients)})
    return built


def sampled(built, server_round):
    return built.sample_partitions(server_round)


def test_sampling_is_reproducible_for_a_seed_and_round():
    assert sampled(strategy(), 3) == sampled(strategy(), 3)
    assert len(sampled(strategy(), 3)) == 3


def test_sampling_changes_across_rounds_and_seeds():
    rounds = {tuple(sampled(strategy(), r)) for r in range(1, 9)}
    assert len(rounds) > 1
    assert {tuple(sampled(strategy(seed=s), 1)) for s in range(8)} != {tuple(sampled(strategy(), 1))}


def test_sampling_does_not_depend_on_node_ids():
    built = strategy()
    first = sampled(built, 2)
    built.bind({partition: 99_999 - partition for partition in range(10)})
    assert sampled(built, 2) == first


def test_min_fit_clients_raises_the_sample_size():
    assert len(sampled(strategy(fraction_fit=0.1, min_fit_clients=4), 1)) == 4


def test_full_participation_takes_everyone():
    assert sampled(strategy(fraction_fit=1.0), 5) == list(range(10))
