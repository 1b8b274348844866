"""The Flower ServerApp: drive the strategy round by round and record everything as it happens.

The loop is the one of ``flwr.serverapp.strategy.Strategy.start`` (configure, send, aggregate,
evaluate) with what a leakage lab needs on top: it can start after round k (``--resume``), it writes
every client's outcome and the global evaluation to the run store as soon as they exist, commits a
checkpoint per round, and reports progress client by client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp

from fedsim.config import ExperimentConfig
from fedsim.messaging import PULL_INTERVAL_S, collect_replies
from fedsim.progress import LogProgress
from fedsim.results import RunStore

logger = logging.getLogger("fedsim")

ROLL_CALL_TIMEOUT_S = 300.0

Evaluator = Callable[[dict[str, torch.Tensor]], dict[str, float]]


def wait_for_nodes(grid: Grid, count: int, timeout: float = ROLL_CALL_TIMEOUT_S) -> list[int]:
    deadline = time.monotonic() + timeout
    while len(nodes := list(grid.get_node_ids())) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(nodes)} of {count} simulated clients came up in {timeout:.0f}s")
        time.sleep(PULL_INTERVAL_S)
    return nodes


def roll_call(grid: Grid, count: int) -> dict[int, int]:
    """Ask every node which partition it holds: partition id -> node id.

    Simulation node ids are random per run; partitions are what the seed and the results refer to.
    """
    nodes = wait_for_nodes(grid, count)
    queries = [Message(RecordDict(), message_type=MessageType.QUERY, dst_node_id=node) for node in nodes]
    replies = list(grid.send_and_receive(queries, timeout=ROLL_CALL_TIMEOUT_S))
    failed = [r for r in replies if r.has_error()]
    if failed or len(replies) != count:
        reason = failed[0].error.reason if failed else f"{len(replies)} of {count} answered"
        raise RuntimeError(f"client roll call failed: {reason}")
    return {int(r.content["identity"]["partition-id"]): r.metadata.src_node_id for r in replies}


@dataclass
class ServerSpec:
    config: ExperimentConfig
    store: RunStore
    strategy: object  # a registered strategy (see strategies.STRATEGIES)
    initial_state: dict[str, torch.Tensor]
    start_round: int  # last completed round (0 for a new run)
    evaluate: Evaluator
    progress: LogProgress
    wrap_grid: Callable[[Grid], Grid] | None = None  # e.g. a man-in-the-middle tap on the wire
    round_hooks: tuple[Callable[[int], object], ...] = ()  # called as a round ends, just before it is committed


class RoundRecorder:
    """Turns replies into metrics rows for one round (and counts outcomes)."""

    def __init__(self, store: RunStore, server_round: int, partition_of_node: dict[int, int], event: str):
        self.store, self.round, self.partition_of_node, self.event = store, server_round, partition_of_node, event
        self.ok = self.failed = 0

    def __call__(self, reply: Message) -> None:
        client = self.partition_of_node[reply.metadata.src_node_id]
        row = {"round": self.round, "event": self.event, "client": client}
        if reply.has_error():
            self.failed += 1
            row |= {"status": "failed", "error_code": reply.error.code, "error": reply.error.reason}
            logger.warning("round %d: client %d failed (%s): %s", self.round, client, self.event, reply.error.reason)
        else:
            self.ok += 1
            metrics = dict(next(iter(reply.content.metric_records.values())))
            metrics.pop("partition-id", None)
            row |= {"status": "ok", **{key.replace("-", "_"): value for key, value in metrics.items()}}
        self.store.append(row)

    def record_missing(self, sent: list[Message], replies: list[Message]) -> None:
        answered = {r.metadata.src_node_id for r in replies}
        for message in sent:
            if message.metadata.dst_node_id not in answered:
                self.failed += 1
                client = self.partition_of_node[message.metadata.dst_node_id]
                logger.warning("round %d: client %d sent no reply before the timeout", self.round, client)
                self.store.append(
                    {"round": self.round, "event": self.event, "client": client, "status": "failed",
                     "error": "no reply before federation.round_timeout"}
                )


def run_rounds(spec: ServerSpec, grid: Grid) -> None:
    config, store, strategy, progress = spec.config, spec.store, spec.strategy, spec.progress
    federation = config.federation
    node_of_partition = roll_call(grid, federation.num_clients)
    partition_of_node = {node: partition for partition, node in node_of_partition.items()}
    strategy.bind(node_of_partition)

    state = spec.initial_state
    start_run(spec)
    arrays = ArrayRecord(state)
    for server_round in range(spec.start_round + 1, federation.rounds + 1):
        started = time.perf_counter()
        messages = list(strategy.configure_train(server_round, arrays, ConfigRecord(), grid))
        progress.round_started(server_round, len(messages))
        recorder = RoundRecorder(store, server_round, partition_of_node, "fit")

        def on_fit_reply(reply: Message, recorder: RoundRecorder = recorder) -> None:
            recorder(reply)
            progress.client_done(not reply.has_error())

        replies = collect_replies(grid, messages, federation.round_timeout, on_fit_reply)
        recorder.record_missing(messages, replies)
        aggregated, _ = strategy.aggregate_train(server_round, replies)
        if aggregated is not None:
            arrays = aggregated
            state = arrays.to_torch_state_dict()

        evaluate_messages = list(strategy.configure_evaluate(server_round, arrays, ConfigRecord(), grid))
        if evaluate_messages:
            client_eval = RoundRecorder(store, server_round, partition_of_node, "client_eval")
            eval_replies = collect_replies(grid, evaluate_messages, federation.round_timeout, client_eval)
            client_eval.record_missing(evaluate_messages, eval_replies)

        commit_round(
            spec,
            server_round,
            state,
            {
                **strategy.round_metrics(server_round),  # e.g. strategy.dp: noise, clipping norm, epsilon
                "clients_ok": recorder.ok,
                "clients_failed": recorder.failed,
                "model_updated": aggregated is not None,
            },
            started,
        )


def start_run(spec: ServerSpec) -> None:
    """Score and commit the initial model (round 0) of a new run, and start the progress display."""
    if spec.start_round == 0 and spec.store.last_committed_round() is None:  # not a run resumed at round 0
        spec.store.append({"round": 0, "event": "eval", **spec.evaluate(spec.initial_state)})
        spec.store.save_checkpoint(0, spec.initial_state)
    spec.progress.start(spec.config.federation.rounds, spec.start_round)


def commit_round(
    spec: ServerSpec, server_round: int, state: dict[str, torch.Tensor], outcome: dict[str, object], started: float
) -> None:
    """Evaluate the round's global model, write its `eval` row, run the round hooks, commit the checkpoint.

    One ending for every protocol's round loop (``run_rounds`` here, ``fedsim.secagg_server``).
    """
    scores = spec.evaluate(state)
    spec.store.append(
        {
            "round": server_round,
            "event": "eval",
            **scores,
            **outcome,
            "seconds": round(time.perf_counter() - started, 4),
        }
    )
    for hook in spec.round_hooks:  # before the commit: what they persist belongs to the round
        hook(server_round)
    spec.store.save_checkpoint(server_round, state)  # commits the round
    if not spec.config.output.save_checkpoints:
        spec.store.prune_checkpoints(keep=server_round)
    spec.progress.round_finished(server_round, scores.get("accuracy"))


def build_server_app(spec: ServerSpec) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run_rounds(spec, spec.wrap_grid(grid) if spec.wrap_grid else grid)

    return app
