"""The legacy client (SecAgg+): injected failures fire before their stage, Flower's protocol checks fail as
replies, the roll call is answered."""

from __future__ import annotations

import pytest
from client_apps import assert_failed, client_config, client_spec, context_of, stage_message
from flwr.app import Message, MessageType, RecordDict
from flwr.common.secure_aggregation.secaggplus_constants import Stage

from clients.legacy_client import build_legacy_client_app
from clients.mods import CLIENT_ERROR_LOG, CLIENT_EXCEPTION

pytestmark = pytest.mark.usefixtures("task_identity")  # messages built outside a Flower run (conftest.py)


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
