"""The run directory: resolved config, environment, metrics log, checkpoints and summary.

A round is committed when its checkpoint is renamed into place; every metrics row of that round is
written (and fsynced) before. ``--resume`` therefore restarts after the last checkpoint and drops the
rows of the round that was interrupted, which the resumed run recomputes identically.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from fedsim.atomic import save_torch_atomic, write_json_atomic, write_text_atomic
from fedsim.config import SCHEMA_VERSION, ExperimentConfig, dump_config, load_config

CONFIG_FILE = "config.yaml"
ENVIRONMENT_FILE = "environment.json"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
CHECKPOINT_DIR = "checkpoints"
_CHECKPOINT = re.compile(r"round_(\d{4,})\.pt$")


def environment_info(device: str) -> dict[str, Any]:
    packages = ("fedsim", "flwr", "ray", "torch", "torchvision", "numpy", "opacus", "scikit-image", "pydantic")
    versions = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "device": device,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "versions": versions,
        "command": sys.argv,
    }


class RunStore:
    """Everything a run persists, in one directory (side effects live here, not in the simulation)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.metrics_path = self.run_dir / METRICS_FILE
        self.checkpoint_dir = self.run_dir / CHECKPOINT_DIR
        self._append_lock = threading.Lock()  # the server thread and attack workers append concurrently

    # ------------------------------------------------------------------ creation and resumption
    @classmethod
    def create(cls, config: ExperimentConfig, device: str, run_dir: Path | None = None) -> "RunStore":
        if run_dir is None:
            name = config.output.run_name or f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}"
            run_dir = config.output.dir / name
        run_dir = Path(run_dir)
        if (run_dir / METRICS_FILE).exists():
            raise FileExistsError(
                f"output.run_name: '{run_dir}' already holds a run; use `fedsim run --resume {run_dir}` or another name"
            )
        run_dir.mkdir(parents=True, exist_ok=True)
        store = cls(run_dir)
        write_text_atomic(run_dir / CONFIG_FILE, dump_config(config), durable=True)
        write_json_atomic(run_dir / ENVIRONMENT_FILE, environment_info(device), durable=True, indent=2)
        store.metrics_path.touch()
        return store

    @classmethod
    def open_for_resume(cls, run_dir: Path) -> tuple["RunStore", ExperimentConfig, int]:
        """Open a killed run; returns the store, its config and the last committed round."""
        run_dir = Path(run_dir)
        if not (run_dir / CONFIG_FILE).is_file():
            raise FileNotFoundError(f"--resume {run_dir}: not a fedsim run directory (no {CONFIG_FILE})")
        store = cls(run_dir)
        config = load_config(run_dir / CONFIG_FILE)
        last = store.last_committed_round()
        if last is None:
            raise FileNotFoundError(
                f"--resume {run_dir}: no checkpoint to resume from (the run was killed before it started)"
            )
        store._drop_rows_after(last)
        return store, config, last

    def _drop_rows_after(self, last_round: int) -> None:
        kept = [row for row in self.rows() if row.get("round", 0) <= last_round]
        body = "".join(json.dumps(row) + "\n" for row in kept)
        write_text_atomic(self.metrics_path, body, durable=True)

    # ------------------------------------------------------------------------------- metrics
    def append(self, row: dict[str, Any]) -> None:
        """Append one metrics row, stamped with the schema version and the time, and make it durable.

        Rows written before versions existed have no ``schema``: they read as version 1.
        """
        if "round" not in row or "event" not in row:
            raise ValueError("every metrics row needs 'round' and 'event'")
        line = json.dumps({**row, "schema": SCHEMA_VERSION, "time": round(time.time(), 3)}, allow_nan=True)
        with self._append_lock, open(self.metrics_path, "a") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def rows(self) -> list[dict[str, Any]]:
        """All complete rows; a line torn by a kill mid-write is ignored."""
        if not self.metrics_path.exists():
            return []
        rows = []
        for line in self.metrics_path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return rows

    # --------------------------------------------------------------------------- checkpoints
    def checkpoint_path(self, server_round: int) -> Path:
        return self.checkpoint_dir / f"round_{server_round:04d}.pt"

    def save_checkpoint(self, server_round: int, state_dict: dict[str, torch.Tensor]) -> None:
        self.checkpoint_dir.mkdir(exist_ok=True)
        path = self.checkpoint_path(server_round)
        # durable: the checkpoint's presence commits the round (see the module docstring)
        save_torch_atomic(path, {k: v.detach().cpu() for k, v in state_dict.items()}, durable=True)

    def load_checkpoint(self, server_round: int) -> dict[str, torch.Tensor]:
        return torch.load(self.checkpoint_path(server_round), map_location="cpu", weights_only=True)

    def last_committed_round(self) -> int | None:
        if not self.checkpoint_dir.is_dir():
            return None
        rounds = [int(m.group(1)) for p in self.checkpoint_dir.iterdir() if (m := _CHECKPOINT.match(p.name))]
        return max(rounds, default=None)

    def prune_checkpoints(self, keep: int) -> None:
        """Keep only the newest checkpoint (when the user did not ask for all of them)."""
        for path in self.checkpoint_dir.glob("round_*.pt"):
            match = _CHECKPOINT.match(path.name)
            if match and int(match.group(1)) != keep:
                path.unlink()

    # ------------------------------------------------------------------------------- summary
    def write_json(self, name: str, payload: dict[str, Any]) -> None:
        write_json_atomic(self.run_dir / name, payload, durable=True, indent=2)

    def read_json(self, name: str) -> dict[str, Any]:
        return json.loads((self.run_dir / name).read_text())
