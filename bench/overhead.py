"""fedsim's overhead per round against a bare Flower `run_simulation`, measured in one run.

Both sides run the same model, data, partitions, clients and local training, and both evaluate the
global model on the same test set after every round (Flower's `evaluate_fn`). fedsim adds its
bookkeeping: deterministic sampling, a metrics row per client, ground-truth files, a checkpoint per
round and the progress display. Per-round time = (end of last round - end of round 1) / (rounds - 1):
round 1 is left out on both sides because it pays for Ray's actor start-up and each actor's first
data load, which are the same for both and not per-round work. Runs alternate (bare, fedsim, bare, ...) and
the medians are compared. Target: ratio <= 1.2.

    .venv/bin/python -m bench.overhead [--rounds 5] [--repeats 3] [--clients 4]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.simulation import run_simulation

from bench.bare_flower_app import build_client_app, cached_federation
from bench.common import CONFIGS, REPO
from fedsim.config import ExperimentConfig, load_config
from fedsim.engine.lifecycle.assembly import run_model_of
from fedsim.engine.lifecycle.runner import CentralEvaluator, _backend_config, _quiet_frameworks, run_experiment
from fedsim.rundir.writer import RunStore

QUICKSTART = CONFIGS / "quickstart.yaml"


def steady_seconds_per_round(round_ends: list[float]) -> float:
    """Mean time of rounds 2..R, from the times at which rounds 0..R finished evaluating."""
    return (round_ends[-1] - round_ends[1]) / (len(round_ends) - 2)


def bare_flower_seconds_per_round(config: ExperimentConfig) -> float:
    """The same experiment written the way Flower's own PyTorch quickstart is written."""
    federation = cached_federation(config.model_dump_json())
    dataset = federation.dataset
    evaluator = CentralEvaluator(config, federation, torch.device("cpu"))

    def new_model() -> torch.nn.Module:
        return run_model_of(config, dataset, seed=0, with_weights=True)

    client_app = build_client_app(config)
    round_ends: list[float] = []
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
            scores = evaluator(arrays.to_torch_state_dict())
            round_ends.append(time.perf_counter())
            return MetricRecord(scores)

        strategy = FedAvg(
            fraction_train=config.federation.fraction_fit,
            fraction_evaluate=0.0,
            min_train_nodes=config.federation.min_fit_clients,
            min_available_nodes=config.federation.num_clients,
        )
        strategy.start(
            grid=grid,
            initial_arrays=ArrayRecord(new_model().state_dict()),
            num_rounds=config.federation.rounds,
            train_config=ConfigRecord(),
            evaluate_fn=evaluate_fn,
        )

    run_simulation(server_app, client_app, config.federation.num_clients, backend_config=_backend_config(config))
    return steady_seconds_per_round(round_ends)


def fedsim_seconds_per_round(config: ExperimentConfig, workdir: Path) -> float:
    run_dir = run_experiment(config, quiet=True, run_dir=workdir / f"run-{time.time_ns()}")
    return steady_seconds_per_round([row["time"] for row in RunStore(run_dir).rows() if row["event"] == "eval"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=QUICKSTART)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error("--rounds must be at least 3 (round 1 is warm-up)")
    config = load_config(
        args.config, [f"federation.rounds={args.rounds}", f"federation.num_clients={args.clients}", "device=cpu"]
    )
    # Ray's workers inherit the environment: let them import bench.bare_flower_app from the repository.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    _quiet_frameworks()
    logging.getLogger("fedsim").setLevel(logging.WARNING)
    bare, ours = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            bare.append(bare_flower_seconds_per_round(config))
            ours.append(fedsim_seconds_per_round(config, Path(tmp)))
            print(f"repeat {repeat + 1}: bare Flower {bare[-1]:.3f} s/round, fedsim {ours[-1]:.3f} s/round", flush=True)
    ratio = statistics.median(ours) / statistics.median(bare)
    print(
        f"{config.data.dataset} {config.model.name}, {args.clients} clients, {args.rounds} rounds, "
        f"median of {args.repeats}: "
        f"bare Flower {statistics.median(bare):.3f} s/round, fedsim {statistics.median(ours):.3f} s/round, "
        f"overhead ratio {ratio:.2f}x (target <= 1.20)"
    )


if __name__ == "__main__":
    main()
