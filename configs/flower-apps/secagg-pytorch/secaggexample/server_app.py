"""secaggexample: A Flower / PyTorch app with SecAgg+ (server side: a legacy strategy in Flower's SecAgg+ workflow)."""

import torch
from flwr.app import Context
from flwr.common import ndarrays_to_parameters
from flwr.server import LegacyContext, ServerApp, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
from flwr.serverapp import Grid

from secaggexample.task import Net

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    torch.manual_seed(context.run_config["seed"])
    initial = [value.numpy() for value in Net().state_dict().values()]
    strategy = FedAvg(
        fraction_fit=context.run_config["fraction-fit"],
        fraction_evaluate=0.0,
        initial_parameters=ndarrays_to_parameters(initial),
        on_fit_config_fn=lambda server_round: {"server-round": server_round},
    )
    legacy_context = LegacyContext(
        context=context,
        config=ServerConfig(num_rounds=context.run_config["num-server-rounds"]),
        strategy=strategy,
    )
    fit_workflow = SecAggPlusWorkflow(
        num_shares=context.run_config["num-shares"],
        reconstruction_threshold=context.run_config["reconstruction-threshold"],
    )
    DefaultWorkflow(fit_workflow=fit_workflow)(grid, legacy_context)

    # Save the final global model
    arrays = legacy_context.state.array_records["parameters"].to_numpy_ndarrays()
    names = Net().state_dict().keys()
    torch.save({name: torch.tensor(value) for name, value in zip(names, arrays)}, context.run_config["final-model"])
