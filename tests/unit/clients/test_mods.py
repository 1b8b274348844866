"""The failure-injection mod: a scheduled NaN poisons only the training it wraps."""

from __future__ import annotations

import pytest
from client_apps import client_config, client_spec, context_of, stage_message, train_message
from flwr.app import Context, Message, RecordDict
from flwr.common.secure_aggregation.secaggplus_constants import Stage

from clients.failures import data_poisoned
from clients.mods import injected_failure_mod

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
