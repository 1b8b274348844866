"""Client apps outside a Flower run: a small federation's client spec, its context, and the messages the
strategy (or SecAgg+) would send it."""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key

from clients.client_app import ClientSpec
from fedsim.config import parse_config
from fedsim.engine.assembly import client_spec_of, federation_of, run_model_of, strategy_of


def client_config(failures=(), strategy=None, timeout: float = 30.0):
    raw = {
        "seed": 2,
        "device": "cpu",
        "data": {"dataset": "digits", "max_train_samples": 60},
        "model": {"name": "lenet", "activation": "relu"},
        "federation": {"num_clients": 2, "failures": list(failures), "round_timeout": timeout},
        "client": {"lr": 0.1, "batch_size": 8, "local_steps": 1},
        "output": {"ground_truth": False},
    }
    if strategy:
        raw["strategy"] = strategy
    return parse_config(raw)


def client_spec(config, run_dir) -> ClientSpec:
    federation = federation_of(config)
    dataset = federation.dataset
    return client_spec_of(
        config,
        run_dir,
        partitions=federation.partitions,
        stats=federation.client_stats,
        num_classes=dataset.num_classes,
        channels=dataset.channels,
        image_size=dataset.image_size,
    )


def context_of(partition: int) -> Context:
    return Context(
        run_id=1, node_id=100 + partition, node_config={"partition-id": partition}, state=RecordDict(), run_config={}
    )


def global_state(config, spec: ClientSpec) -> dict[str, torch.Tensor]:
    model = run_model_of(config, spec, seed=0, with_weights=True)
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def train_message(config, spec: ClientSpec, server_round: int, partition: int, state=None) -> Message:
    """The train message the strategy of ``config`` sends ``partition`` in ``server_round``."""
    strategy = strategy_of(config)
    strategy.bind({0: 100, 1: 101})
    messages = list(
        strategy.configure_train(server_round, ArrayRecord(state or global_state(config, spec)), ConfigRecord(), None)
    )
    return next(m for m in messages if m.metadata.dst_node_id == 100 + partition)


def stage_message(stage: str, server_round: int, partition: int) -> Message:
    """A SecAgg+ stage message as SecAggPlusWorkflow sends it (the stage in its config, the round as group id)."""
    content = RecordDict({RECORD_KEY_CONFIGS: ConfigRecord({Key.STAGE: stage})})
    return Message(content, dst_node_id=100 + partition, message_type=MessageType.TRAIN, group_id=str(server_round))


def assert_failed(reply: Message, code: int, reason: str) -> None:
    assert reply.has_error(), "the reply should be a failure"
    assert reply.error.code == code and reply.error.reason.startswith(reason), reply.error.reason
