"""fedsim's overhead per round against a bare Flower `run_simulation`, measured in one run.

Both sides run the same model, data, partitions, clients and local training, and both evaluate the
global model on the same test set after every round (Flower's `evaluate_fn`). fedsim adds its
bookkeeping: deterministic sampling, a metrics row per client, ground-truth files, a checkpoint per
round and the progress display. Per-round time = (end of last round - end of round 1) / (rounds - 1):
round 1 is left out on both sides because it pays for Ray's actor start-up and each actor's first
data load, which are the same for both and not per-round work. Runs alternate (bare, fedsim, bare, ...) and
the medians are compared. Target: ratio <= 1.2.

``--fixed-cost``: what a run costs beyond its rounds instead (start-up and shut-down: Ray, Flower's actors, the
attack workers, data, the run directory), as wall time minus R steady rounds (rounds 2..R's mean, each side its
own) minus, with attacks, the attacks still running after the last round. Measured for a bare Flower simulation
of the same size, a fedsim run with and without attacks, and each point of a 3-point sequential sweep (over
``client.lr``) with and without attacks, whose points share Ray and the attack workers (the first starts them).
Target: a sweep point's fixed cost below 5 s.

    .venv/bin/python -m bench.overhead [--rounds 5] [--repeats 3] [--clients 4]
    .venv/bin/python -m bench.overhead --fixed-cost [--rounds 4] [--clients 4]
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
from fedsim.engine.assembly import run_model_of
from fedsim.engine.lifecycle.evaluation import CentralEvaluator
from fedsim.engine.lifecycle.simulation import backend_config, quiet_frameworks
from fedsim.engine.run import run_experiment
from fedsim.rundir.writer import RunStore

QUICKSTART = CONFIGS / "quickstart.yaml"


def steady_seconds_per_round(round_ends: list[float]) -> float:
    """Mean time of rounds 2..R, from the times at which rounds 0..R finished evaluating."""
    return (round_ends[-1] - round_ends[1]) / (len(round_ends) - 2)


def bare_flower_seconds_per_round(config: ExperimentConfig) -> float:
    """The same experiment written the way Flower's own PyTorch quickstart is written."""
    return steady_seconds_per_round(bare_flower_round_ends(config))


def bare_flower_round_ends(config: ExperimentConfig) -> list[float]:
    """When each round 0..R of the bare Flower simulation finished evaluating (time.perf_counter())."""
    federation = cached_federation(config.model_dump_json())
    dataset = federation.dataset
    evaluator = CentralEvaluator(
        run_model_of(config, dataset, seed=0, with_weights=False), federation, torch.device("cpu")
    )

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

    run_simulation(
        server_app,
        client_app,
        config.federation.num_clients,
        backend_config=backend_config(config.federation, config.adversary),
    )
    return round_ends


def fedsim_seconds_per_round(config: ExperimentConfig, workdir: Path) -> float:
    run_dir = run_experiment(config, quiet=True, run_dir=workdir / f"run-{time.time_ns()}")
    return steady_seconds_per_round([row["time"] for row in RunStore(run_dir).rows() if row["event"] == "eval"])


# --- fixed cost --------------------------------------------------------------------------------------------------

#: the attacks of the fixed-cost runs: one DLG per client in round 1 (they overlap the later rounds)
ATTACKS = ["adversary.tap=mitm", "adversary.rounds=[1]", "adversary.attacks=[{name: dlg, iterations: 20, restarts: 1}]"]


def fixed_cost(wall: float, round_ends: list[float], attack_tail: float = 0.0) -> float:
    """Wall time beyond R steady rounds (and the attacks after the last round)."""
    rounds = len(round_ends) - 1
    return wall - rounds * steady_seconds_per_round(round_ends) - attack_tail


def _run_times(run_dir: Path) -> tuple[list[float], float]:
    """A run's round ends (rounds 0..R) and its attack tail (attack rows after the last round's)."""
    rows = RunStore(run_dir).rows()
    ends = [row["time"] for row in rows if row["event"] == "eval"]
    attacks = [row["time"] for row in rows if row["event"] == "attack"]
    return ends, max([0.0, *(end - ends[-1] for end in attacks)])


def bare_fixed_cost(config: ExperimentConfig) -> float:
    started = time.perf_counter()
    ends = bare_flower_round_ends(config)
    return fixed_cost(time.perf_counter() - started, ends)


def run_fixed_cost(config: ExperimentConfig, workdir: Path) -> float:
    started = time.perf_counter()
    run_dir = run_experiment(config, quiet=True, run_dir=workdir / f"run-{time.time_ns()}")
    wall = time.perf_counter() - started
    ends, tail = _run_times(run_dir)
    return fixed_cost(wall, ends, tail)


def sweep_fixed_costs(config_path: Path, overrides: list[str], workdir: Path) -> list[float]:
    """Each point's fixed cost in a sequential 3-point sweep over client.lr."""
    from fedsim.sweep import plan_sweep, run_sweep

    plan = plan_sweep(
        config_path, overrides=overrides, grid=["client.lr=0.05,0.04,0.03"], out=workdir / f"sweep-{time.time_ns()}"
    )
    costs = []
    for outcome in run_sweep(plan, quiet=True):
        ends, tail = _run_times(plan.sweep_dir / outcome.name)
        costs.append(fixed_cost(outcome.seconds, ends, tail))
    return costs


def fixed_costs(config_path: Path, overrides: list[str]) -> None:
    """Print the fixed cost of a bare Flower simulation, a fedsim run and a sweep point, with and without attacks."""
    plain = load_config(config_path, overrides)
    attacked_overrides = [*overrides, *ATTACKS]
    attacked = load_config(config_path, attacked_overrides)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        bare = bare_fixed_cost(plain)
        rows = {
            "fedsim run, no attacks": [run_fixed_cost(plain, workdir)],
            "fedsim run, attacks": [run_fixed_cost(attacked, workdir)],
            "sweep point, no attacks": sweep_fixed_costs(config_path, overrides, workdir),
            "sweep point, attacks": sweep_fixed_costs(config_path, attacked_overrides, workdir),
        }
    print(
        f"\nfixed cost of a run beyond its rounds ({plain.data.dataset} {plain.model.name}, "
        f"{plain.federation.num_clients} clients, {plain.federation.rounds} rounds):"
    )
    print(f"  {'bare Flower simulation':34}{bare:7.1f} s")
    for label, costs in rows.items():
        points = " / ".join(f"{cost:.1f}" for cost in costs)
        later = statistics.mean(costs[1:]) if len(costs) > 1 else costs[0]
        detail = f"  (points {points} s; after the first: {later:.1f} s)" if len(costs) > 1 else ""
        print(f"  {label:34}{later:7.1f} s{'':3}{later / bare:5.2f}x bare{detail}")
    print("target: a sweep point's fixed cost (after the first, which starts Ray and the workers) < 5 s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=QUICKSTART)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fixed-cost", action="store_true", help="measure what a run costs beyond its rounds")
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error("--rounds must be at least 3 (round 1 is warm-up)")
    overrides = [f"federation.rounds={args.rounds}", f"federation.num_clients={args.clients}", "device=cpu"]
    config = load_config(args.config, overrides)
    # Ray's workers inherit the environment: let them import bench.bare_flower_app from the repository.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    quiet_frameworks()
    logging.getLogger("fedsim").setLevel(logging.WARNING)
    if args.fixed_cost:
        fixed_costs(args.config, overrides)
        return
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
