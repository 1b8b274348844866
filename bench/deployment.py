"""Where a deployed run's time goes: the same experiment in Flower's simulation and on a local SuperLink with one
SuperNode per client (``fedsim.engine.deployment.local_federation``, as ``make deployment-smoke`` runs it), measured
in one run, and the parts of a deployed round measured on their own.

Per run: the wall time from the call to the run directory, the time until round 1 was committed (start-up: Ray and
the actors, or the SuperLink, the SuperNodes, ``flwr run``, the ServerApp and the roll call), and the median round
of rounds 2..R (round 1 pays each side's first start-up). The ratio of the rounds is the per-round overhead of the
deployment path.

A deployed round's parts, each measured here (or read from Flower where it is a fixed interval):

* a ClientApp process per message: Flower's SuperExec starts ``flwr-clientapp`` for every message a SuperNode gets;
  it imports fedsim's App (torch, Flower, the data code) and prepares the partitions: timed in fresh interpreters;
* polling: a SuperNode asks the SuperLink for a message every 3 s when it has none (fixed in Flower 1.42: half of it
  on average per round), its SuperExec asks for a task every ``FLWR_SUPEREXEC_TASK_POLL_INTERVAL`` seconds (Flower's
  default 1 s; the local federation sets 0.1), and the SuperNode looks for the ClientApp's reply every 0.5 s;
* serialisation: the model to Flower's wire format (ArrayRecord protobuf) and back.

    .venv/bin/python -m bench.deployment [--rounds 4] [--clients 4]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.common import CONFIGS, REPO
from fedsim.config import ExperimentConfig, load_config
from fedsim.engine.assembly import run_model_of
from fedsim.engine.deployment.local_federation import SUPEREXEC_POLL_INTERVAL_S, LocalFederation
from fedsim.engine.deployment.run_config import RunRequest
from fedsim.engine.deployment.submit import SuperLink, submit
from fedsim.engine.lifecycle.federation import prepare_federation
from fedsim.engine.run import run_experiment
from fedsim.rundir.layout import METRICS_FILE

#: what a SuperNode waits between asking for messages when it has none, and for its ClientApp's reply (Flower 1.42's
#: flwr/supernode/start_client_internal.py: fixed, no flag or setting)
SUPERNODE_IDLE_POLL_S = 3.0
SUPERNODE_REPLY_POLL_S = 0.5

#: what a fresh flwr-clientapp pays before it trains: importing fedsim's App, then preparing the partitions
CLIENTAPP_PROBE = """
import time
started = time.perf_counter()
import fedsim.engine.deployment.app
imported = time.perf_counter()
from fedsim.config import load_config
from fedsim.engine.lifecycle.federation import prepare_federation
config = load_config({config!r}, {overrides!r})
prepare_federation(config.data, config.federation.num_clients, config.seed)
print(imported - started, time.perf_counter() - imported)
"""


def smoke_config(rounds: int, clients: int) -> tuple[Path, list[str]]:
    """The deployment smoke's experiment (configs/demo.yaml, one step on four images per client), without attacks:
    they run beside the rounds, not in them."""
    overrides = [
        f"federation.rounds={rounds}",
        f"federation.num_clients={clients}",
        "adversary.attacks=[]",
    ]
    return CONFIGS / "demo.yaml", overrides


def eval_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines()]
    return [row for row in rows if row["event"] == "eval"]


def round_times(run_dir: Path) -> list[float]:
    """Each committed round's seconds (its `eval` row), rounds 1..R."""
    return [float(row["seconds"]) for row in eval_rows(run_dir) if row["round"] >= 1]


def first_commit(run_dir: Path, started: float) -> float:
    """Seconds from ``started`` (a time.time()) until round 1 was committed."""
    return float(next(row for row in eval_rows(run_dir) if row["round"] == 1)["time"]) - started


def simulated(config: ExperimentConfig, out: Path) -> dict[str, float]:
    started, clock = time.time(), time.perf_counter()
    run_dir = run_experiment(config, quiet=True, run_dir=out / "simulated")
    return _figures(run_dir, started, time.perf_counter() - clock)


def deployed(config: ExperimentConfig, out: Path) -> dict[str, float]:
    started, clock = time.time(), time.perf_counter()
    with LocalFederation(config.federation.num_clients, workdir=out / "federation") as federation:
        run_dir = submit(RunRequest(config, run_dir=out / "deployed"), SuperLink(federation.address, insecure=True))
    return _figures(run_dir, started, time.perf_counter() - clock)


def _figures(run_dir: Path, started: float, wall: float) -> dict[str, float]:
    rounds = round_times(run_dir)
    return {"wall": wall, "first": first_commit(run_dir, started), "round": statistics.median(rounds[1:] or rounds)}


def clientapp_start(config_path: Path, overrides: list[str], repeats: int) -> tuple[float, float, float]:
    """Median seconds a fresh interpreter takes to import fedsim's App, then to prepare the partitions, and the
    CPU seconds (user and system) the whole process takes."""
    probe = CLIENTAPP_PROBE.format(config=str(config_path), overrides=overrides)
    imports, preparations, cpus = [], [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        imported, prepared = (float(value) for value in done.stdout.split()[-2:])
        imports.append(imported)
        preparations.append(prepared)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(imports), statistics.median(preparations), statistics.median(cpus)


def serialisation(config: ExperimentConfig, repeats: int = 20) -> float:
    """Median seconds to turn the model into Flower's wire format and back (ArrayRecord protobuf), as every
    message of a round carries it once each way."""
    from flwr.app import ArrayRecord

    from fedsim.core.flower_private import array_record_serde

    array_record_to_proto, array_record_from_proto, ProtoArrayRecord = array_record_serde()

    federation = prepare_federation(config.data, config.federation.num_clients, config.seed)
    state = run_model_of(config, federation.dataset, seed=0, with_weights=True).state_dict()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        payload = array_record_to_proto(ArrayRecord(state)).SerializeToString()
        array_record_from_proto(ProtoArrayRecord.FromString(payload)).to_torch_state_dict()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3, help="fresh ClientApp interpreters timed")
    args = parser.parse_args(argv)
    logging.getLogger("fedsim").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    config_path, overrides = smoke_config(args.rounds, args.clients)
    config = load_config(config_path, overrides)
    with tempfile.TemporaryDirectory(prefix="fedsim-bench-deployment-") as scratch:
        out = Path(scratch)
        simulation = simulated(config, out)
        deployment = deployed(config, out)
    imported, prepared, cpu = clientapp_start(config_path, overrides, args.repeats)
    wire = serialisation(config)
    polling = SUPERNODE_IDLE_POLL_S / 2 + SUPEREXEC_POLL_INTERVAL_S / 2 + SUPERNODE_REPLY_POLL_S / 2
    print(f"{config_path.name} {' '.join(overrides)}: {args.clients} clients, {args.rounds} rounds, no attacks\n")
    print(f"{'':38}{'simulation':>12}{'deployment':>12}{'ratio':>8}")
    for key, label in (
        ("wall", "run, wall (s)"),
        ("first", "until round 1 committed (s)"),
        ("round", "round 2..R, median (s)"),
    ):
        print(f"{label:38}{simulation[key]:12.2f}{deployment[key]:12.2f}{deployment[key] / simulation[key]:8.1f}")
    print("\na deployed round's parts (s):")
    parts = {
        "ClientApp process: import fedsim's App": imported,
        "ClientApp process: prepare the partitions": prepared,
        "polling (SuperNode 3 s / 2, SuperExec, reply 0.5 s / 2)": polling,
        "serialisation of the model, both ways": 2 * wire,
        "the simulation's round (training, evaluation)": simulation["round"],
    }
    for label, seconds in parts.items():
        print(f"  {label:56}{seconds:8.2f}")
    explained = sum(parts.values())
    print(f"  {'sum, for one client alone':56}{explained:8.2f}  (measured round: {deployment['round']:.2f})")
    cores = os.cpu_count() or 1
    print(
        f"\na ClientApp process takes {cpu:.1f} CPU s before it trains: a round's {args.clients} of them on "
        f"{cores} core(s) take at least {cpu * args.clients / min(cores, args.clients):.1f} s"
    )


if __name__ == "__main__":
    main()
