"""The audited app's own numbers per round, as fields of the run's `eval` rows.

Named ``app_<kind>_<metric>``: ``app_central_accuracy`` (the app's evaluate_fn on the server),
``app_federated_eval_acc`` (its strategy's aggregate of the clients' evaluations), ``app_train_train_loss`` (its
aggregate of their train metrics). fedsim's own scores of the released model (``accuracy``, ``loss``, where the
audit config names a held-out loader) keep their plain names: the two are never mixed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

APP_PREFIX = "app_"


class AppMetrics:
    """Collects the app's numbers as its server computes them, until the round's row is written."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rounds: dict[int, dict[str, float]] = {}

    def record(self, server_round: int, kind: str, metrics: dict[str, float]) -> None:
        with self._lock:
            fields = self._rounds.setdefault(server_round, {})
            fields.update({f"{APP_PREFIX}{kind}_{name.replace('-', '_')}": value for name, value in metrics.items()})

    def of(self, server_round: int) -> dict[str, float]:
        """The round's fields, taken (a round's row is written once)."""
        with self._lock:
            return self._rounds.pop(server_round, {})

    def before(self, server_round: int) -> Iterator[tuple[int, dict[str, float]]]:
        """Rounds before ``server_round`` that no row took (e.g. the app's evaluation of its initial model), taken."""
        with self._lock:
            earlier = sorted(r for r in self._rounds if r < server_round)
            taken = [(r, self._rounds.pop(r)) for r in earlier]
        yield from ((r, fields) for r, fields in taken if fields)


def app_evaluation(row: dict[str, Any]) -> dict[str, Any]:
    """The app's own numbers in an `eval` row."""
    return {key: value for key, value in row.items() if key.startswith(APP_PREFIX) and value is not None}
