"""What each client really trained on, kept apart from everything the attacker can reach.

Clients write one file per (round, client) into the run directory, never into their Flower reply.
Only scoring (outside any attack) reads it back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedsim.core.atomic import inside, write_json_atomic
from fedsim.rundir.layout import GROUND_TRUTH_CLIENT_GLOB, GROUND_TRUTH_DIR, ground_truth_file, ground_truth_round_dir


class GroundTruthStore:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.root = self.run_dir / GROUND_TRUTH_DIR

    def _path(self, server_round: int, client: int) -> Path:
        return self.root / ground_truth_round_dir(server_round) / ground_truth_file(client)

    def write(self, server_round: int, client: int, batches: list[list[int]], labels: list[list[int]]) -> None:
        """Record the sample ids of every local step, in the order they were used, and their labels."""
        path = inside(self.run_dir, self._path(server_round, client))  # before mkdir: a symlinked folder leads out
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"round": server_round, "client": client, "batches": batches, "labels": labels}
        write_json_atomic(path, payload, root=self.run_dir)

    def read(self, server_round: int, client: int) -> dict[str, Any]:
        return json.loads(self._path(server_round, client).read_text())

    def clients(self, server_round: int) -> list[int]:
        folder = self.root / ground_truth_round_dir(server_round)
        if not folder.is_dir():
            return []
        return sorted(int(p.stem.split("_")[1]) for p in folder.glob(GROUND_TRUTH_CLIENT_GLOB))
