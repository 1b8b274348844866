"""The client mods: a scheduled NaN poisons only the training it wraps; a failing client's traceback goes to the
run's client log, and never through a symlink out of the run directory."""

from __future__ import annotations

import pytest
from client_apps import client_config, client_spec, context_of, stage_message, train_message
from flwr.app import Context, Message, RecordDict
from flwr.common.secure_aggregation.secaggplus_constants import Stage

from clients.failures import data_poisoned
from clients.mods import error_reply_mod, injected_failure_mod

pytestmark = pytest.mark.usefixtures("task_identity")  # messages built outside a Flower run (conftest.py)


SECAGG = {"name": "secagg+"}


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


def crashing(received: Message, context: Context) -> Message:
    raise ValueError("boom")


def failed_reply(run_dir):
    config = client_config()
    spec = client_spec(config, run_dir)
    return error_reply_mod(run_dir)(train_message(config, spec, 1, partition=0), context_of(0), crashing)


def test_a_failing_client_replies_in_one_line_and_logs_its_traceback_in_the_run(tmp_path):
    reply = failed_reply(tmp_path)
    assert reply.has_error() and reply.error.reason == "ValueError: boom"
    log = (tmp_path / "client_errors.log").read_text()
    assert log.startswith("--- round 1, client 0") and 'raise ValueError("boom")' in log


def test_a_client_log_symlinked_outside_the_run_is_not_written_and_the_reply_says_why(tmp_path):
    run_dir, outside = tmp_path / "run", tmp_path / "elsewhere.log"
    run_dir.mkdir()
    (run_dir / "client_errors.log").symlink_to(outside)
    reason = failed_reply(run_dir).error.reason
    assert "\n" not in reason
    assert reason.startswith("ValueError: boom (traceback not logged: refusing to write ")
    assert "client_errors.log' is a symlink to " in reason
    assert not outside.exists()
