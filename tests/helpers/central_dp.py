"""A central-DP strategy bound to a few clients, and one round of replies to it."""

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from adversary.taps import StrategyTap
from fedsim.config import parse_config
from fedsim.engine.assembly import strategy_of

NUM_CLIENTS = 4
GLOBAL = {"w": torch.linspace(-1.0, 1.0, 6).reshape(2, 3), "b": torch.tensor([0.5, -0.5])}


def dp_config(num_clients: int = NUM_CLIENTS, fraction_fit: float = 1.0, **dp):
    return parse_config(
        {"seed": 5, "federation": {"num_clients": num_clients, "fraction_fit": fraction_fit}, "strategy": {"dp": dp}}
    )


def bound(config, tap=None):
    strategy = strategy_of(config)
    if tap is not None:
        strategy = StrategyTap(strategy, tap)
    strategy.bind({partition: 100 + partition for partition in range(config.federation.num_clients)})
    return strategy


def reply(message: Message, state: dict[str, torch.Tensor], partition: int, num_examples: int = 10) -> Message:
    metrics = MetricRecord({"num-examples": num_examples, "partition-id": partition})
    return Message(RecordDict({"arrays": ArrayRecord(state), "metrics": metrics}), reply_to=message)


def shifted(shift: dict[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    return {name: GLOBAL[name] + scale * shift[name] for name in GLOBAL}


def small_step() -> dict[str, torch.Tensor]:
    """A client's update well inside every clipping ball used here (norm 0.008); never zero, see noise_of."""
    return shifted({name: torch.ones_like(value) for name, value in GLOBAL.items()}, 0.001)


def run_round(strategy, server_round: int, states: list[dict[str, torch.Tensor]], weights=None, start=GLOBAL):
    messages = list(strategy.configure_train(server_round, ArrayRecord(start), ConfigRecord(), None))
    assert len(messages) == len(states)
    weights = weights or [10] * len(states)
    replies = [reply(m, s, p, w) for p, (m, s, w) in enumerate(zip(messages, states, weights))]
    aggregated, _ = strategy.aggregate_train(server_round, replies)
    return messages, aggregated.to_torch_state_dict() if aggregated is not None else None
