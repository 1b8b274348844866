"""What travels between server and clients: the names of message records and keys, and how to read them.

One module that both sides import, so that a key is spelled once. It sits at the bottom of the
layers: it imports Flower, nothing of the project.
"""

from __future__ import annotations

from typing import cast

from flwr.app import Message, MessageType, MetricRecord
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage

# --- keys of a client's metrics and of the server's train config
PARTITION_ID = "partition-id"  # also the node_config key that tells a simulated node its partition
NUM_PARTITIONS = "num-partitions"  # the node_config key with the number of partitions (Flower's simulation)
SERVER_ROUND = "server-round"  # in every train config: Message-API ConfigRecord and legacy FitIns config alike
NUM_EXAMPLES = "num-examples"  # FedAvg weights replies by it (Flower's FedAvg.weighted_by_key)
LOCAL_STEPS = "local-steps"
TRAIN_LOSS = "train-loss"
SERVED_MODEL = "served-model"  # a module the server sends instead of the agreed model (a JSON description)
# a privacy audit under SecAgg+: which slot of the canary clients this client carries, of how many, at what weight
CANARY_SLOT = "audit-canary-slot"
CANARY_SLOTS = "audit-canary-slots"
CANARY_WEIGHT = "audit-canary-weight"

# --- record names of Message-API messages (Flower's FedAvg defaults: arrayrecord_key, configrecord_key)
ARRAYS = "arrays"
CONFIG = "config"
METRICS = "metrics"
IDENTITY = "identity"  # the roll call's reply: {identity: {partition-id: p}}

# --- Flower's legacy path (SecAgg+): where a FitRes travels inside a Message
FIT_METRICS = "fitres.metrics"  # a client's metrics, in clear
FIT_NUM_EXAMPLES = "fitres.num_examples"

# --- the stages of Flower's SecAgg+ protocol, in order (flwr.common.secure_aggregation.secaggplus_constants.Stage)
SECAGG_STAGES = ("setup", "share_keys", "collect_masked_vectors", "unmask")
SECAGG_TRAINING_STAGE = "collect_masked_vectors"  # the stage in which SecAgg+ clients train and send masked vectors
SECAGG_RECORD = RECORD_KEY_CONFIGS  # the ConfigRecord of every SecAgg+ stage message

# fedsim names the stages as Flower's protocol does; a Flower upgrade that renames one must fail here.
if tuple(Stage.all()) != SECAGG_STAGES:
    raise ImportError(
        f"Flower's SecAgg+ stages are {Stage.all()}; fedsim.core.wire.SECAGG_STAGES expects {SECAGG_STAGES}"
    )


def reply_metrics(reply: Message) -> MetricRecord:
    """The metrics a Message-API client sent with its reply (its one MetricRecord)."""
    return next(iter(reply.content.metric_records.values()))


def stage_of(message: Message) -> str | None:
    """The SecAgg+ stage a server message asks for (None for any other message)."""
    if message.metadata.message_type != MessageType.TRAIN or SECAGG_RECORD not in message.content.config_records:
        return None
    stage = message.content.config_records[SECAGG_RECORD].get(Key.STAGE)
    return str(stage) if stage is not None else None


def round_of(message: Message) -> int:
    """SecAggPlusWorkflow tags every stage message of a round with the round as its group id."""
    return int(message.metadata.group_id)


def server_round_of(message: Message) -> int | None:
    """The round a server message belongs to, on either path (None when it names none, e.g. the roll call)."""
    if stage_of(message) is not None:
        return round_of(message)
    config = message.content.config_records.get(CONFIG)
    return int(cast(int, config[SERVER_ROUND])) if config is not None and SERVER_ROUND in config else None
