"""opacusexample: each node trains with Opacus' PrivacyEngine (DP-SGD), noise 1.0 on even and 1.5 on odd nodes,
and reports the epsilon its accountant spent (as Flower's Opacus example does)."""

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from opacus import PrivacyEngine

from opacusexample.task import Net, load_data
from opacusexample.task import test as test_fn

app = ClientApp()


def _data(context: Context):
    return load_data(
        context.node_config["partition-id"],
        context.node_config["num-partitions"],
        context.run_config["batch-size"],
        context.run_config["dataset"],
        context.run_config["data-files"],
    )


def train_dp(model, trainloader, privacy_engine, optimizer, target_delta, device):
    criterion = torch.nn.CrossEntropyLoss()
    model.train()
    running_loss = 0.0
    for batch in trainloader:
        images, labels = batch["img"].to(device), batch["label"].to(device)
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    epsilon = privacy_engine.get_epsilon(delta=target_delta)
    return running_loss / max(len(trainloader), 1), epsilon


@app.train()
def train(msg: Message, context: Context):
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    device = torch.device("cpu")
    partition_id = context.node_config["partition-id"]
    noise_multiplier = 1.0 if partition_id % 2 == 0 else 1.5
    server_round = msg.content["config"]["server-round"]
    torch.manual_seed(context.run_config["seed"] * 1000 + server_round * 100 + partition_id)
    trainloader, _ = _data(context)
    optimizer = torch.optim.SGD(model.parameters(), lr=msg.content["config"]["lr"], momentum=0.9)
    privacy_engine = PrivacyEngine(secure_mode=False)
    model, optimizer, trainloader = privacy_engine.make_private(
        module=model,
        optimizer=optimizer,
        data_loader=trainloader,
        noise_multiplier=noise_multiplier,
        max_grad_norm=context.run_config["max-grad-norm"],
    )
    train_loss, epsilon = train_dp(
        model, trainloader, privacy_engine, optimizer, context.run_config["target-delta"], device
    )
    metrics = {
        "train_loss": train_loss,
        "epsilon": epsilon,
        "target_delta": context.run_config["target-delta"],
        "num-examples": len(trainloader.dataset),
    }
    content = RecordDict({"arrays": ArrayRecord(model._module.state_dict()), "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context):
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    _, valloader = _data(context)
    eval_loss, eval_acc = test_fn(model, valloader, torch.device("cpu"))
    metrics = {"eval_loss": eval_loss, "eval_acc": eval_acc, "num-examples": len(valloader.dataset)}
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)
