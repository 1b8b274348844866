"""Client mods on both client paths: an exception or an injected failure becomes a failed reply with its reason."""

from __future__ import annotations

import time

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage

import clients.failures
from clients.client_app import ClientSpec, build_client_app
from clients.failures import data_poisoned
from clients.legacy_client import build_legacy_client_app
from clients.mods import CLIENT_ERROR_LOG, CLIENT_EXCEPTION, CLIENT_NON_FINITE_LOSS, injected_failure_mod
from fedsim.config import parse_config
from fedsim.engine.lifecycle.assembly import client_spec_of, run_model_of, strategy_of
from fedsim.engine.lifecycle.federation import prepare_federation


pytestmark = pytest.mark.usefixtures("task_identity")  # messages built outside a Flower run (conftest.py)


def client_config(failures=(), strategy=None, timeout: float = 30.0):
    raw = {
        "seed": 2, "device": "cpu",
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
    federation = prepare_federation(config)
    dataset = federation.dataset
    return client_spec_of(
        config, run_dir, partitions=federation.partitions, stats=federation.client_stats,
        num_classes=dataset.num_classes, channels=dataset.channels, image_size=dataset.image_size,
    )


def context_of(partition: int) -> Context:
    return Context(run_id=1, node_id=100 + partition, node_config={"partition-id": partition}, state=RecordDict(), run_config={})


def global_state(config, spec: ClientSpec) -> dict[str, torch.Tensor]:
    model = run_model_of(config, spec, seed=0, with_weights=True)
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def train_message(config, spec: ClientSpec, server_round: int, partition: int, state=None) -> Message:
    """The train message the strategy of ``config`` sends ``partition`` in ``server_round``."""
    strategy = strategy_of(config)
    strategy.bind({0: 100, 1: 101})
    messages = list(strategy.configure_train(server_round, ArrayRecord(state or global_state(config, spec)), ConfigRecord(), None))
    return next(m for m in messages if m.metadata.dst_node_id == 100 + partition)


def stage_message(stage: str, server_round: int, partition: int) -> Message:
    """A SecAgg+ stage message as SecAggPlusWorkflow sends it (the stage in its config, the round as group id)."""
    content = RecordDict({RECORD_KEY_CONFIGS: ConfigRecord({Key.STAGE: stage})})
    return Message(content, dst_node_id=100 + partition, message_type=MessageType.TRAIN, group_id=str(server_round))


def assert_failed(reply: Message, code: int, reason: str) -> None:
    assert reply.has_error(), "the reply should be a failure"
    assert reply.error.code == code and reply.error.reason.startswith(reason), reply.error.reason


# ---------------------------------------------------------------------------------------- Message API


def test_a_message_api_client_trains_when_no_failure_is_scheduled_for_it(tmp_path):
    config = client_config([{"round": 1, "client": 1}])
    spec = client_spec(config, tmp_path)
    reply = build_client_app(spec)(train_message(config, spec, 1, partition=0), context_of(0))
    assert not reply.has_error() and reply.content["metrics"]["partition-id"] == 0
    assert not (tmp_path / CLIENT_ERROR_LOG).exists()


def test_an_injected_exception_is_a_failed_reply_with_its_traceback_in_the_client_log(tmp_path):
    config = client_config([{"round": 2, "client": 1}])
    spec = client_spec(config, tmp_path)
    app = build_client_app(spec)
    assert not app(train_message(config, spec, 1, partition=1), context_of(1)).has_error()  # round 1: not scheduled
    reply = app(train_message(config, spec, 2, partition=1), context_of(1))
    assert_failed(reply, CLIENT_EXCEPTION, "InjectedFailure: client 1 was told to fail in round 2")
    log = (tmp_path / CLIENT_ERROR_LOG).read_text()
    assert "--- round 2, client 1, train" in log and "Traceback" in log and "InjectedFailure" in log


def test_an_injected_nan_goes_through_the_real_non_finite_loss_check(tmp_path):
    config = client_config([{"round": 1, "client": 0, "kind": "nan"}])
    spec = client_spec(config, tmp_path)
    reply = build_client_app(spec)(train_message(config, spec, 1, partition=0), context_of(0))
    assert_failed(reply, CLIENT_NON_FINITE_LOSS, "NonFiniteLossError: local loss is nan at step 1")


def test_an_injected_hang_answers_only_after_the_round_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(clients.failures, "HANG_GRACE_S", 0.1)
    config = client_config([{"round": 1, "client": 0, "kind": "hang"}], timeout=0.3)
    spec = client_spec(config, tmp_path)
    started = time.monotonic()
    reply = build_client_app(spec)(train_message(config, spec, 1, partition=0), context_of(0))
    assert time.monotonic() - started >= 0.4
    assert_failed(reply, CLIENT_EXCEPTION, "InjectedFailure: client 0 was told to stop answering in round 1")


def test_an_exception_in_a_handler_is_a_failed_reply_on_train_and_evaluate(tmp_path):
    config = client_config()
    spec = client_spec(config, tmp_path)
    app = build_client_app(spec)
    wrong = {"not-a-layer": torch.zeros(2)}  # weights that do not fit the model
    reply = app(train_message(config, spec, 1, partition=0, state=wrong), context_of(0))
    assert_failed(reply, CLIENT_EXCEPTION, "RuntimeError: Error(s) in loading state_dict")
    evaluate = Message(RecordDict({"arrays": ArrayRecord(wrong)}), dst_node_id=100, message_type=MessageType.EVALUATE)
    assert_failed(app(evaluate, context_of(0)), CLIENT_EXCEPTION, "RuntimeError: Error(s) in loading state_dict")
    assert "--- client 0, evaluate" in (tmp_path / CLIENT_ERROR_LOG).read_text()


# --------------------------------------------------------------------------------- legacy (SecAgg+)

SECAGG = {"name": "secagg+"}


def test_an_injected_failure_fires_before_its_secagg_stage_and_is_a_failed_reply(tmp_path):
    spec = client_spec(client_config([{"round": 3, "client": 1, "stage": "setup"}], strategy=SECAGG), tmp_path)
    reply = build_legacy_client_app(spec)(stage_message(Stage.SETUP, 3, partition=1), context_of(1))
    assert_failed(reply, CLIENT_EXCEPTION, "InjectedFailure: client 1 was told to fail in round 3, stage setup")
    assert "--- round 3, client 1, setup" in (tmp_path / CLIENT_ERROR_LOG).read_text()


def test_an_exception_in_flowers_protocol_checks_is_a_failed_reply_on_the_legacy_path(tmp_path):
    spec = client_spec(client_config(strategy=SECAGG), tmp_path)
    # share_keys before any setup: secaggplus_mod aborts
    reply = build_legacy_client_app(spec)(stage_message(Stage.SHARE_KEYS, 1, partition=0), context_of(0))
    assert_failed(reply, CLIENT_EXCEPTION, "ValueError: Abort secure aggregation")
    assert "Traceback" in (tmp_path / CLIENT_ERROR_LOG).read_text()


def test_the_roll_call_is_answered_on_the_legacy_path(tmp_path):
    spec = client_spec(client_config(strategy=SECAGG), tmp_path)
    query = Message(RecordDict(), dst_node_id=101, message_type=MessageType.QUERY)
    reply = build_legacy_client_app(spec)(query, context_of(1))
    assert reply.content["identity"]["partition-id"] == 1


# ------------------------------------------------------------------------------------------ the mod


@pytest.mark.parametrize(
    ("strategy", "message"),
    [
        (None, lambda config, spec: train_message(config, spec, 1, partition=0)),
        (SECAGG, lambda config, spec: stage_message(Stage.COLLECT_MASKED_VECTORS, 1, partition=0)),
    ],
    ids=["message-api", "secagg-training-stage"],
)
def test_the_nan_failure_poisons_only_the_training_it_wraps(tmp_path, strategy, message):
    config = client_config([{"round": 1, "client": 0, "kind": "nan"}], strategy=strategy)
    spec = client_spec(config, tmp_path)
    seen = []

    def handler(received: Message, context: Context) -> Message:
        seen.append(data_poisoned())
        return Message(RecordDict(), reply_to=received)

    mod = injected_failure_mod(spec.failures)
    mod(message(config, spec), context_of(0), handler)
    mod(message(config, spec), context_of(1), handler)  # another client: clean data
    assert seen == [True, False] and not data_poisoned()
