"""secaggexample: A Flower / PyTorch app with SecAgg+ (client side: a NumPyClient behind secaggplus_mod)."""

import torch
from flwr.app import Context
from flwr.client import NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp

from secaggexample.task import Net, load_data
from secaggexample.task import train as train_fn


class FlowerClient(NumPyClient):
    def __init__(self, trainloader, local_epochs, lr, seed):
        self.net = Net()
        self.trainloader = trainloader
        self.local_epochs = local_epochs
        self.lr = lr
        self.seed = seed

    def fit(self, parameters, config):
        state = zip(self.net.state_dict().keys(), parameters)
        self.net.load_state_dict({name: torch.tensor(value) for name, value in state})
        torch.manual_seed(self.seed + int(config.get("server-round", 0)) * 100)  # reproducible shuffling
        loss = train_fn(self.net, self.trainloader, self.local_epochs, self.lr, torch.device("cpu"))
        arrays = [value.cpu().numpy() for value in self.net.state_dict().values()]
        return arrays, len(self.trainloader.dataset), {"train_loss": loss}


def client_fn(context: Context):
    partition_id = context.node_config["partition-id"]
    trainloader, _ = load_data(
        partition_id,
        context.node_config["num-partitions"],
        context.run_config["batch-size"],
        context.run_config["dataset"],
        context.run_config["data-files"],
    )
    seed = context.run_config["seed"] * 1000 + partition_id
    return FlowerClient(
        trainloader, context.run_config["local-epochs"], context.run_config["learning-rate"], seed
    ).to_client()


app = ClientApp(client_fn=client_fn, mods=[secaggplus_mod])
