"""The nodes' notes (``fedsim.engine.app_audit.client_probe``), read as they are written: one JSON line per probed
call, in a file per node process; each file read from where the last reading stopped."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

TRAIN = "train"  # the message type of a train call, as the notes write it


class Notes:
    """Every probed call so far, in the order read; the samples of a train call's steps by (round, client)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.calls: list[dict[str, Any]] = []
        self._offsets: dict[Path, int] = {}
        self._steps: dict[tuple[int, int], list[list[Any]]] = {}
        self._lock = threading.Lock()

    def refresh(self) -> list[dict[str, Any]]:
        """Read what the nodes wrote since the last call; returns those calls."""
        fresh = []
        with self._lock:
            for path in sorted(self.folder.glob("*.jsonl")) if self.folder.is_dir() else []:
                with path.open("rb") as file:
                    file.seek(self._offsets.get(path, 0))
                    text = file.read()
                complete = text[: text.rfind(b"\n") + 1]  # a line still being written is read next time
                self._offsets[path] = self._offsets.get(path, 0) + len(complete)
                for line in complete.decode().splitlines():
                    call = json.loads(line)
                    fresh.append(call)
                    if call.get("message_type") == TRAIN and call.get("round") is not None:
                        self._steps[(int(call["round"]), int(call["client"]))] = call.get("steps", [])
            self.calls.extend(fresh)
        return fresh

    def steps(self, server_round: int, client: int, dataset_size: int) -> list[list[int]] | None:
        """The indices each local step of that train call drew from a data set of ``dataset_size`` samples (the
        node's training split), batches that drew nothing left out; None where the call noted no such step."""
        self.refresh()
        with self._lock:
            drawn = self._steps.get((server_round, client), [])
        batches = [indices for size, indices in drawn if size == dataset_size and indices]
        return batches or None

    def step_counts(self) -> dict[int, int]:
        """Per client, the batches its train calls drew, over every round so far (a DP-SGD step each)."""
        self.refresh()
        with self._lock:
            counts: dict[int, int] = {}
            for (_, client), drawn in self._steps.items():
                counts[client] = counts.get(client, 0) + len(drawn)
        return counts
