"""Live progress of a run: a rich display on a terminal, or plain log lines with --quiet."""

from __future__ import annotations

import logging
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

logger = logging.getLogger("fedsim")


class LogProgress:
    """One log line per round (`--quiet`, CI, files)."""

    def start(self, total_rounds: int, completed_rounds: int) -> None:
        self.total = total_rounds
        if completed_rounds:
            logger.info("resuming after round %d of %d", completed_rounds, total_rounds)

    def round_started(self, server_round: int, num_clients: int) -> None:
        self._started = time.perf_counter()
        self._clients, self._done, self._failed = num_clients, 0, 0

    def client_done(self, ok: bool) -> None:
        self._done += 1
        self._failed += 0 if ok else 1

    def round_finished(self, server_round: int, accuracy: float | None) -> None:
        failed = f", {self._failed} failed" if self._failed else ""
        acc = f"{accuracy:.4f}" if accuracy is not None else "n/a"
        logger.info(
            "round %d/%d: %d/%d clients%s, test accuracy %s (%.1fs)",
            server_round,
            self.total,
            self._done - self._failed,
            self._clients,
            failed,
            acc,
            time.perf_counter() - self._started,
        )

    def stop(self) -> None:
        pass


class RichProgress(LogProgress):
    """Round bar with clients done, last accuracy and ETA (log lines still go above it)."""

    def __init__(self, console: Console | None = None) -> None:
        self.progress = Progress(
            TextColumn("[bold]round"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("clients {task.fields[clients]}"),
            TextColumn("acc {task.fields[accuracy]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )

    def start(self, total_rounds: int, completed_rounds: int) -> None:
        super().start(total_rounds, completed_rounds)
        self.task = self.progress.add_task(
            "rounds", total=total_rounds, completed=completed_rounds, clients="-", accuracy="-"
        )
        self.progress.start()

    def round_started(self, server_round: int, num_clients: int) -> None:
        super().round_started(server_round, num_clients)
        self.progress.update(self.task, clients=f"0/{num_clients}")

    def client_done(self, ok: bool) -> None:
        super().client_done(ok)
        failed = f" ({self._failed} failed)" if self._failed else ""
        self.progress.update(self.task, clients=f"{self._done}/{self._clients}{failed}")

    def round_finished(self, server_round: int, accuracy: float | None) -> None:
        super().round_finished(server_round, accuracy)
        shown = f"{accuracy:.3f}" if accuracy is not None else "n/a"
        self.progress.update(self.task, completed=server_round, accuracy=shown)

    def stop(self) -> None:
        self.progress.stop()
