"""localdpexample: the quickstart's clients, their updates clipped and noised by Flower's LocalDpMod.

Misconfigured on purpose, as an audit should catch it: the noise is computed from a sensitivity of 1e-4 while the
clipping norm that bounds an update is 1.0, so the epsilon of 10 it states is not what the noise provides."""

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import LocalDpMod

from localdpexample.task import Net, load_data
from localdpexample.task import test as test_fn
from localdpexample.task import train as train_fn

# Flower ClientApp, its train replies through LocalDpMod
app = ClientApp(mods=[LocalDpMod(clipping_norm=1.0, sensitivity=1e-4, epsilon=10.0, delta=1e-5)])


def _data(context: Context):
    partition_id = context.node_config["partition-id"]
    num_partitions = context.node_config["num-partitions"]
    batch_size = context.run_config["batch-size"]
    return load_data(
        partition_id, num_partitions, batch_size, context.run_config["dataset"], context.run_config["data-files"]
    )


@app.train()
def train(msg: Message, context: Context):
    """Train the model on local data."""

    # Load the model and initialize it with the received weights
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    model.to(device)

    # Reproducible shuffling: the same seed gives the same run
    server_round = msg.content["config"]["server-round"]
    torch.manual_seed(context.run_config["seed"] * 1000 + server_round * 100 + context.node_config["partition-id"])

    # Load the data
    trainloader, _ = _data(context)

    # Call the training function
    train_loss = train_fn(model, trainloader, context.run_config["local-epochs"], msg.content["config"]["lr"], device)

    # Construct and return reply Message
    model_record = ArrayRecord(model.state_dict())
    metrics = {"train_loss": train_loss, "num-examples": len(trainloader.dataset)}
    metric_record = MetricRecord(metrics)
    content = RecordDict({"arrays": model_record, "metrics": metric_record})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context):
    """Evaluate the model on local data."""

    # Load the model and initialize it with the received weights
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    model.to(device)

    # Load the data
    _, valloader = _data(context)

    # Call the evaluation function
    eval_loss, eval_acc = test_fn(model, valloader, device)

    # Construct and return reply Message
    metrics = {"eval_loss": eval_loss, "eval_acc": eval_acc, "num-examples": len(valloader.dataset)}
    metric_record = MetricRecord(metrics)
    content = RecordDict({"metrics": metric_record})
    return Message(content=content, reply_to=msg)
