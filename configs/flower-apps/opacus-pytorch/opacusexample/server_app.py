"""opacusexample: FedAvg with a central evaluation of each round's global model on a held-out split."""

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from opacusexample.task import Net, load_data
from opacusexample.task import test as test_fn

# Create ServerApp
app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Main entry point for the ServerApp."""

    # Read run config
    fraction_train: float = context.run_config["fraction-train"]
    fraction_evaluate: float = context.run_config["fraction-evaluate"]
    num_rounds: int = context.run_config["num-server-rounds"]
    lr: float = context.run_config["learning-rate"]

    # Load global model (seeded: the same seed gives the same run)
    torch.manual_seed(context.run_config["seed"])
    global_model = Net()
    arrays = ArrayRecord(global_model.state_dict())

    # Initialize FedAvg strategy
    strategy = FedAvg(fraction_train=fraction_train, fraction_evaluate=fraction_evaluate)

    def central_evaluation(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        """The global model on the held-out split of partition 0 (as the server would hold its own test set)."""
        model = Net()
        model.load_state_dict(arrays.to_torch_state_dict())
        config = context.run_config
        _, testloader = load_data(0, 2, config["batch-size"], config["dataset"], config["data-files"])
        loss, accuracy = test_fn(model, testloader, torch.device("cpu"))
        return MetricRecord({"loss": loss, "accuracy": accuracy})

    # Start strategy, run FedAvg for `num_rounds`
    result = strategy.start(
        grid=grid,
        initial_arrays=arrays,
        train_config=ConfigRecord({"lr": lr}),
        num_rounds=num_rounds,
        evaluate_fn=central_evaluation,
    )

    # Save final model to disk
    print("\nSaving final model to disk...")
    state_dict = result.arrays.to_torch_state_dict()
    torch.save(state_dict, context.run_config["final-model"])
