"""Run one experiment: prepare data and model, launch the Flower simulation, write the summary."""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clients.client_app import CLIENT_ERROR_LOG, ClientSpec, build_client_app
from fedsim.config import ExperimentConfig
from fedsim.data import ChannelStats, ImageDataset, federation_stats, load_dataset, partition_indices
from fedsim.devices import resolve_device
from fedsim.evaluation import evaluate
from fedsim.models import build_model
from fedsim.progress import LogProgress, RichProgress
from fedsim.results import SUMMARY_FILE, RunStore
from fedsim.seeding import derive_seed
from fedsim.server_app import ServerSpec, build_server_app
from strategies import STRATEGIES

logger = logging.getLogger("fedsim")
PARTITIONS_FILE = "partitions.json"


@dataclass(frozen=True)
class Federation:
    """The data side of a run: the data set, who holds what, and how each client normalises."""

    dataset: ImageDataset
    partitions: tuple[np.ndarray, ...]
    client_stats: tuple[ChannelStats, ...]
    test_stats: ChannelStats


def prepare_federation(config: ExperimentConfig) -> Federation:
    dataset = load_dataset(config.data, config.seed)
    partitions = tuple(
        partition_indices(dataset.y_train, config.data, config.federation.num_clients, config.seed)
    )
    client_stats, test_stats = federation_stats(dataset.x_train, partitions, config.data.normalize)
    return Federation(dataset, partitions, client_stats, test_stats)


def partition_record(federation: Federation) -> dict[str, Any]:
    """Who holds which samples and how they are normalised (scoring side only, never the attacker)."""
    labels = federation.dataset.y_train
    return {
        "clients": [
            {
                "client": client,
                "num_examples": int(len(ids)),
                "label_counts": np.bincount(labels[ids], minlength=federation.dataset.num_classes).tolist(),
                "normalization": stats.to_dict(),
                "sample_ids": ids.tolist(),
            }
            for client, (ids, stats) in enumerate(zip(federation.partitions, federation.client_stats))
        ],
        "test_normalization": federation.test_stats.to_dict(),
    }


class CentralEvaluator:
    """Scores global weights on the held-out test set (server side, after every round)."""

    def __init__(self, config: ExperimentConfig, federation: Federation, device: torch.device) -> None:
        dataset = federation.dataset
        self.model = build_model(
            config.model.model_copy(update={"checkpoint": None, "pretrained": False}),
            dataset.channels, dataset.num_classes, dataset.image_size, seed=0,
        ).to(device)
        self.x = federation.test_stats.normalize(torch.from_numpy(dataset.x_test))
        self.y = torch.from_numpy(dataset.y_test)
        self.num_classes = dataset.num_classes

    def __call__(self, state: dict[str, torch.Tensor]) -> dict[str, float]:
        self.model.load_state_dict(state)
        return evaluate(self.model, self.x, self.y, self.num_classes)


def _quiet_frameworks() -> None:
    # Ray warns that it will stop hiding GPUs from actors that reserved none; clients pick their device
    # from federation.client_resources.gpus themselves (clients.client_app.client_device), so that is moot.
    warnings.filterwarnings("ignore", message="Tip: In future versions of Ray", category=FutureWarning)
    # Flower's own INFO/WARNING lines (deprecations, sampling chatter) would drown the progress display.
    logging.getLogger("flwr").setLevel(logging.ERROR)


def _backend_config(config: ExperimentConfig) -> dict[str, Any]:
    resources = config.federation.client_resources
    return {
        "client_resources": {"num_cpus": resources.cpus, "num_gpus": resources.gpus},
        "init_args": {"logging_level": logging.ERROR, "log_to_driver": False, "include_dashboard": False},
    }


def summarize(store: RunStore, wall_seconds: float) -> dict[str, Any]:
    rows = store.rows()
    evals = [r for r in rows if r["event"] == "eval"]
    fits = [r for r in rows if r["event"] == "fit"]
    final = evals[-1] if evals else {}
    return {
        "run_dir": str(store.run_dir),
        "rounds_completed": final.get("round", 0),
        "final": {k: final[k] for k in ("loss", "accuracy", "precision", "recall", "specificity", "f1", "mcc") if k in final},
        "best_accuracy": max((r["accuracy"] for r in evals), default=None),
        "client_updates": len(fits),
        "client_failures": sum(1 for r in fits if r.get("status") == "failed"),
        "wall_seconds_last_session": round(wall_seconds, 2),
    }


def run_experiment(
    config: ExperimentConfig | None = None,
    *,
    resume: Path | None = None,
    quiet: bool = False,
    run_dir: Path | None = None,
) -> Path:
    """Run (or resume) one experiment and return its run directory."""
    from flwr.simulation import run_simulation

    started = time.perf_counter()
    _quiet_frameworks()
    if resume is not None:
        store, config, last_round = RunStore.open_for_resume(resume)
        initial_state = store.load_checkpoint(last_round)
    else:
        assert config is not None, "a config or a run to resume is required"
        device = resolve_device(config.device)
        store = RunStore.create(config, str(device), run_dir)
        last_round, initial_state = 0, None
    device = resolve_device(config.device)
    federation = prepare_federation(config)
    store.write_json(PARTITIONS_FILE, partition_record(federation))
    dataset = federation.dataset
    if initial_state is None:
        model = build_model(
            config.model, dataset.channels, dataset.num_classes, dataset.image_size, seed=derive_seed(config.seed, "model")
        )
        initial_state = {k: v.detach().cpu() for k, v in model.state_dict().items()}

    run_dir_abs = store.run_dir.resolve()
    client_spec = ClientSpec(
        config=config,
        run_dir=run_dir_abs,
        partitions=federation.partitions,
        stats=federation.client_stats,
        num_classes=dataset.num_classes,
        channels=dataset.channels,
        image_size=dataset.image_size,
    )
    progress = LogProgress() if quiet else RichProgress()
    server_spec = ServerSpec(
        config=config,
        store=store,
        strategy=STRATEGIES.get(config.strategy.name)(config.federation, config.seed),
        initial_state=initial_state,
        start_round=last_round,
        evaluate=CentralEvaluator(config, federation, device),
        progress=progress,
    )
    if last_round < config.federation.rounds:
        try:
            run_simulation(
                server_app=build_server_app(server_spec),
                client_app=build_client_app(client_spec),
                num_supernodes=config.federation.num_clients,
                backend_config=_backend_config(config),
            )
        finally:
            progress.stop()
    summary = summarize(store, time.perf_counter() - started)
    store.write_json(SUMMARY_FILE, summary)
    _log_summary(summary)
    return store.run_dir


def _log_summary(summary: dict[str, Any]) -> None:
    final = summary["final"]
    logger.info(
        "finished %d rounds: test accuracy %.4f (best %.4f), loss %.4f",
        summary["rounds_completed"], final.get("accuracy", float("nan")),
        summary["best_accuracy"] or float("nan"), final.get("loss", float("nan")),
    )
    if summary["client_failures"]:
        logger.warning(
            "%d of %d client updates failed; reasons in metrics.jsonl, tracebacks in %s/%s",
            summary["client_failures"], summary["client_updates"], summary["run_dir"], CLIENT_ERROR_LOG,
        )
