"""A bare Flower ClientApp for ``bench.overhead``, written as Flower's PyTorch quickstart writes one.

It lives in its own module so that Ray's workers import it instead of unpickling data with every message.
"""

from __future__ import annotations

import functools

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from clients.training import train_locally
from fedsim.config import ExperimentConfig
from fedsim.core.seeding import derive_seed
from fedsim.engine.assembly import run_model_of
from fedsim.engine.lifecycle.federation import Federation, prepare_federation


@functools.lru_cache(maxsize=1)
def cached_federation(config_json: str) -> Federation:
    """Data and partitions, loaded once per process, as Flower's quickstarts cache their FederatedDataset."""
    config = ExperimentConfig.model_validate_json(config_json)
    return prepare_federation(config.data, config.federation.num_clients, config.seed)


def build_client_app(config: ExperimentConfig) -> ClientApp:
    config_json = config.model_dump_json()
    client_app = ClientApp()

    @client_app.train()
    def train(message: Message, context: Context) -> Message:
        # Only the config travels to the Ray actors; each loads the data itself (cached per process).
        local = cached_federation(config_json)
        partition = int(context.node_config["partition-id"])
        ids = local.partitions[partition]
        x = local.client_stats[partition].normalize(torch.from_numpy(local.dataset.x_train[ids]))
        y = torch.from_numpy(local.dataset.y_train[ids])
        model = run_model_of(config, local.dataset, seed=0, with_weights=True)
        model.load_state_dict(message.content["arrays"].to_torch_state_dict())
        server_round = int(message.content["config"]["server-round"])
        result = train_locally(
            model, x, y, ids, config.client, derive_seed(config.seed, "train", server_round, partition)
        )
        metrics = MetricRecord({"num-examples": len(x), "train-loss": result.train_loss})
        return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics}), reply_to=message)

    return client_app
