"""A client's DP-SGD history across rounds, kept on disk, and the epsilon Opacus' accountants give for it.

Flower may run a client on a different Ray actor every round, so an accountant in process memory would
forget earlier rounds. The ledger is a small JSON file per client (``<state_dir>/privacy.json``) with
one entry per round it trained in; Opacus' accountants are rebuilt from it every round. Entries are
keyed by round: recording round ``r`` replaces round ``r``'s entry and nothing else, so a round that ran
before a kill and runs again after ``fedsim run --resume`` is counted once (the resumed run reports the
same epsilon as an uninterrupted one), and a client that timed out in round ``r`` but finishes after it
already trained in round ``r + 1`` adds its late round without erasing the later one: the late update
was computed and sent, so its privacy is spent whether or not the server used it. Read, change and write
happen under an exclusive lock on the ledger, because the late round and the next one can finish at the
same moment on two Ray actors. Neither the ledger nor its lock is written through a symlink that leads out
of the run directory (``fedsim.core.atomic.inside``): that is refused in one line before anything is made.
"""

from __future__ import annotations

import fcntl
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from fedsim.core.atomic import inside, write_json_atomic
from fedsim.rundir.layout import PRIVACY_LEDGER_FILE, PRIVACY_LEDGER_LOCK, run_dir_of_client_state


@dataclass(frozen=True)
class LedgerEntry:
    """One round of DP-SGD: ``steps`` noisy steps at this noise multiplier and sampling rate."""

    round: int
    noise_multiplier: float
    sample_rate: float
    steps: int


class ClientPrivacyLedger:
    """The rounds a client trained under DP-SGD; in memory only when ``state_dir`` is None."""

    def __init__(self, state_dir: Path | None) -> None:
        self.path = None if state_dir is None else Path(state_dir) / PRIVACY_LEDGER_FILE
        self.entries: list[LedgerEntry] = self._load()

    def _load(self) -> list[LedgerEntry]:
        if self.path is None or not self.path.exists():
            return []
        return [LedgerEntry(**entry) for entry in json.loads(self.path.read_text())["rounds"]]

    def record(self, entry: LedgerEntry) -> list[LedgerEntry]:
        """Replace whatever was recorded for ``entry.round`` by ``entry``; return the history, by round."""
        with self._locked():
            if self.path is not None:
                self.entries = self._load()  # what another actor recorded since this ledger was opened
            kept = [other for other in self.entries if other.round != entry.round]
            self.entries = sorted([*kept, entry], key=lambda e: e.round)
            if self.path is not None:
                # a kill mid-write leaves the previous ledger, never half of one
                write_json_atomic(
                    self.path, {"rounds": [asdict(e) for e in self.entries]}, root=_bounds(self.path), indent=1
                )
        return self.entries

    @contextmanager
    def _locked(self) -> Iterator[None]:
        if self.path is None:
            yield
            return
        lock_path = inside(_bounds(self.path), self.path.with_name(PRIVACY_LEDGER_LOCK))  # before mkdir: see _bounds
        inside(_bounds(self.path), self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _bounds(ledger: Path) -> Path:
    """What the ledger's files must stay inside: the run directory its client state folder lies in (so that a
    symlinked ``clients`` folder is caught too), or that folder itself when it lies outside any run."""
    return run_dir_of_client_state(ledger.parent) or ledger.parent


def accountant_history(entries: list[LedgerEntry]) -> list[tuple[float, float, int]]:
    """Opacus' ``(noise_multiplier, sample_rate, steps)`` history, merging runs of equal settings as its own
    accountants do when stepped one step at a time (so PRV discretises exactly what Opacus would)."""
    history: list[tuple[float, float, int]] = []
    for entry in entries:
        if history and history[-1][:2] == (entry.noise_multiplier, entry.sample_rate):
            history[-1] = (entry.noise_multiplier, entry.sample_rate, history[-1][2] + entry.steps)
        else:
            history.append((entry.noise_multiplier, entry.sample_rate, entry.steps))
    return history


def epsilon(entries: list[LedgerEntry], delta: float, accountant: str) -> float:
    """The (epsilon, delta) guarantee of all ``entries`` together, from Opacus' ``rdp`` or ``prv`` accountant.

    Without noise there is no guarantee: epsilon is infinite.
    """
    if any(entry.noise_multiplier == 0 for entry in entries):
        return math.inf
    history = accountant_history(entries)
    if not history:
        return 0.0
    from opacus.accountants import create_accountant  # importing opacus takes seconds: only DP runs do

    mechanism = create_accountant(mechanism=accountant)
    mechanism.history = history
    return float(mechanism.get_epsilon(delta=delta))
