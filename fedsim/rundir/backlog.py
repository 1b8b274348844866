"""What the adversary saw in a round, kept on disk until every attack on it has been scored.

Attacks run beside the training, so a run killed mid-way can leave a committed round whose attacks never
finished. The round's tapped updates are written here before the round is committed and removed once all
its attack jobs have recorded their rows; ``fedsim run --resume`` re-attacks whatever is still here (same
seeds, hence the same reconstructions). Only what the tap saw is stored: never ground truth.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from adversary.taps import TappedUpdate
from fedsim.core.atomic import inside, save_torch_atomic
from fedsim.models.checkpoint import load_weights_only
from fedsim.rundir.layout import BACKLOG_DIR, BACKLOG_PATTERN, backlog_file


class AttackBacklog:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / BACKLOG_DIR

    def path(self, server_round: int) -> Path:
        return self.dir / backlog_file(server_round)

    def save(self, server_round: int, updates: list[TappedUpdate]) -> None:
        """Write the round's tapped updates atomically (a kill leaves the old file or the new one)."""
        path = inside(self.run_dir, self.path(server_round))  # before mkdir: a symlinked folder leads out
        self.dir.mkdir(parents=True, exist_ok=True)
        save_torch_atomic(path, [asdict(update) for update in updates], root=self.run_dir)

    def load(self, server_round: int) -> list[TappedUpdate]:
        records = load_weights_only(self.path(server_round), str(self.path(server_round)))
        return [TappedUpdate(**{**record, "contributors": tuple(record["contributors"])}) for record in records]

    def rounds(self) -> list[int]:
        if not self.dir.is_dir():
            return []
        return sorted(int(match.group(1)) for p in self.dir.iterdir() if (match := BACKLOG_PATTERN.match(p.name)))

    def discard(self, server_round: int) -> None:
        self.path(server_round).unlink(missing_ok=True)
