"""The Message API client app: injected failures and exceptions become failed replies with their traceback in
the client log; a non-finite update is refused before it is sent."""

from __future__ import annotations

import math
import time

import pytest
import torch
from client_apps import assert_failed, client_config, client_spec, context_of, train_message
from flwr.app import ArrayRecord, Message, MessageType, RecordDict
from malicious_pickles import assert_really_malicious, save_malicious

import clients.failures
from clients.client_app import build_client_app, check_finite
from clients.mods import CLIENT_ERROR_LOG, CLIENT_EXCEPTION, CLIENT_NON_FINITE_LOSS
from clients.training import NonFiniteUpdateError

pytestmark = pytest.mark.usefixtures("task_identity")  # messages built outside a Flower run (conftest.py)


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


def test_a_client_update_with_nan_or_inf_is_refused_before_it_is_sent():
    check_finite({"w": torch.ones(3), "num_batches_tracked": torch.tensor(2)})
    with pytest.raises(NonFiniteUpdateError, match="2 of 4 values of 'w' are NaN or infinite"):
        check_finite({"b": torch.zeros(2), "w": torch.tensor([1.0, math.nan, math.inf, 0.0])})


@pytest.mark.parametrize("verify", [False, True])
def test_a_served_pickle_is_refused_and_never_run(tmp_path, verify):
    config = client_config()
    config.client.verify_model = verify
    spec = client_spec(config, tmp_path)
    assert_really_malicious(tmp_path)
    planted = tmp_path / "planted-by-the-server"
    save_malicious(tmp_path / "served.pt", planted)
    message = train_message(config, spec, 1, partition=0)
    message.content["config"]["served-model"] = (tmp_path / "served.pt").read_bytes()
    reply = build_client_app(spec)(message, context_of(0))
    assert_failed(reply, CLIENT_EXCEPTION, "ServedModelError: the server sent a served model as bytes (a pickle?)")
    assert not planted.exists()


def test_a_served_description_is_built_by_the_clients_own_code(tmp_path):
    from adversary.modifications.imprint import ImprintedModel
    from adversary.modifications.served import describe, rebuild
    from fedsim.engine.assembly import run_model_of

    config = client_config()
    agreed = run_model_of(config, client_spec(config, tmp_path), seed=0, with_weights=True)
    served = ImprintedModel(agreed, input_size=64, bins=8)
    before = torch.random.get_rng_state()
    rebuilt = rebuild(describe(served), agreed, (1, 8, 8))
    assert torch.equal(torch.random.get_rng_state(), before)  # training's random stream is untouched
    assert isinstance(rebuilt, ImprintedModel) and rebuilt.model is not agreed
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {k: v.shape for k, v in served.state_dict().items()}
    with pytest.raises(
        RuntimeError, match=r"^the server asked for architecture 'trojan'; this client builds: imprint$"
    ):
        rebuild('{"architecture": "trojan"}', agreed, (1, 8, 8))


def test_the_ground_truth_leaves_out_the_audit_canary_examples():
    from clients.client_app import _without_canaries

    batches, labels = _without_canaries([[3, -1, 5], [-2]], [[0, 7, 1], [4]])
    assert batches == [[3, 5], []] and labels == [[0, 1], []]


@pytest.mark.parametrize(
    ("description", "reason"),
    [
        (
            '{"architecture": "imprint", "input_size": 64}',
            "ServedModelError: the served imprint description has no 'bins'",
        ),
        (
            '{"architecture": "imprint", "input_size": 64, "bins": 1000000000000}',
            "ServedModelError: the served imprint description: bins = 1000000000000; allowed: a whole number 2 ..",
        ),
    ],
)
def test_a_served_description_without_bins_or_with_huge_ones_fails_the_reply_in_one_line(tmp_path, description, reason):
    config = client_config()
    spec = client_spec(config, tmp_path)
    message = train_message(config, spec, 1, partition=0)
    message.content["config"]["served-model"] = description
    assert_failed(build_client_app(spec)(message, context_of(0)), CLIENT_EXCEPTION, reason)  # was: KeyError: 'bins'
