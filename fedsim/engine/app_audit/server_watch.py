"""What an audited app's server computes beside the grid: its central evaluation, the metrics its strategy
aggregates, and the strategy object itself (where a DP wrapper shows, ``fedsim.engine.app_audit.dp``).

Flower's Message-API strategies run through ``Strategy.start``; while the audit runs, ``start`` is wrapped so that
the app's ``evaluate_fn`` and its strategy's ``aggregate_train`` / ``aggregate_evaluate`` report what they return.
Each returns exactly what it did: the app's run is the same with and without the watch.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

#: the numbers one round's evaluation or aggregation gave: (round, kind, metrics); kinds below
Recorder = Callable[[int, str, dict[str, float]], None]
CENTRAL = "central"  # the app's evaluate_fn on the server
FEDERATED = "federated"  # its strategy's aggregate of the clients' evaluate replies
TRAIN = "train"  # its strategy's aggregate of the clients' train metrics


def numbers(metrics: Any) -> dict[str, float]:
    """A MetricRecord (or dict) as plain numbers; lists and anything else left out."""
    if not metrics:
        return {}
    return {
        str(key): float(value)
        for key, value in dict(metrics).items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


@contextlib.contextmanager
def watching_strategies(record: Recorder, started: Callable[[Any], None] = lambda strategy: None) -> Iterator[None]:
    """While inside: every Message-API strategy's ``start`` reports its rounds' metrics to ``record`` and hands the
    strategy to ``started`` (before round 1)."""
    from flwr.serverapp.strategy import Strategy

    original = Strategy.start
    signature = inspect.signature(original)

    @functools.wraps(original)
    def start(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        evaluate_fn = bound.arguments.get("evaluate_fn")
        if evaluate_fn is not None:
            bound.arguments["evaluate_fn"] = _reporting(evaluate_fn, record, CENTRAL)
        started(self)
        with _aggregates_reported(self, record):
            return original(*bound.args, **bound.kwargs)

    setattr(Strategy, "start", start)  # noqa: B010  (mypy refuses assigning to a method: replacing it is the point)
    try:
        yield
    finally:
        setattr(Strategy, "start", original)  # noqa: B010


def _reporting(evaluate_fn: Callable[[int, Any], Any], record: Recorder, kind: str) -> Callable[[int, Any], Any]:
    def evaluate(server_round: int, arrays: Any) -> Any:
        result = evaluate_fn(server_round, arrays)
        record(server_round, kind, numbers(result))
        return result

    return evaluate


@contextlib.contextmanager
def _aggregates_reported(strategy: Any, record: Recorder) -> Iterator[None]:
    """The strategy's own aggregation of its clients' metrics, reported per round (instance attributes, removed
    after: the class is untouched)."""
    aggregate_train, aggregate_evaluate = strategy.aggregate_train, strategy.aggregate_evaluate

    def train(server_round: int, replies: Any) -> Any:
        arrays, metrics = aggregate_train(server_round, replies)
        record(server_round, TRAIN, numbers(metrics))
        return arrays, metrics

    def evaluate(server_round: int, replies: Any) -> Any:
        metrics = aggregate_evaluate(server_round, replies)
        record(server_round, FEDERATED, numbers(metrics))
        return metrics

    strategy.aggregate_train, strategy.aggregate_evaluate = train, evaluate
    try:
        yield
    finally:
        del strategy.aggregate_train, strategy.aggregate_evaluate
