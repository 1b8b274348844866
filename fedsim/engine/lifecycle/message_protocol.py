"""A round on Flower's Message API: the strategy configures, the clients train and evaluate, the strategy aggregates.

Each client's `fit` (and `client_eval`) row is written as its reply arrives, a client that sent none
before the timeout gets a failed row, and the round releases what ``aggregate_train`` returns.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from flwr.app import ArrayRecord, ConfigRecord, Context, Message
from flwr.serverapp import Grid

import fedsim.core.wire as wire
from fedsim.core.messaging import collect_replies
from fedsim.engine.lifecycle.rounds import NO_REPLY, Round, RoundResult, client_fields
from strategies.base import MessageStrategy

logger = logging.getLogger("fedsim")


class ReplyRecorder:
    """Turns one round's replies to one kind of message into rows (and counts outcomes)."""

    def __init__(self, current: Round, event: str) -> None:
        self.round, self.event = current, event
        self.ok = self.failed = 0

    def __call__(self, reply: Message) -> None:
        client = self.round.partition_of_node[reply.metadata.src_node_id]
        row = {"round": self.round.number, "event": self.event, "client": client}
        if reply.has_error():
            self.failed += 1
            row |= {"status": "failed", "error_code": reply.error.code, "error": reply.error.reason}
            logger.warning(
                "round %d: client %d failed (%s): %s", self.round.number, client, self.event, reply.error.reason
            )
        else:
            self.ok += 1
            row |= {"status": "ok", **client_fields(wire.reply_metrics(reply))}
        self.round.record(row)

    def record_missing(self, sent: list[Message], replies: list[Message]) -> None:
        answered = {r.metadata.src_node_id for r in replies}
        for message in sent:
            if message.metadata.dst_node_id not in answered:
                self.failed += 1
                client = self.round.partition_of_node[message.metadata.dst_node_id]
                logger.warning("round %d: client %d sent no reply before the timeout", self.round.number, client)
                self.round.record(
                    {
                        "round": self.round.number,
                        "event": self.event,
                        "client": client,
                        "status": "failed",
                        "error": NO_REPLY,
                    }
                )


class MessageRounds:
    """Plays rounds with a ``MessageStrategy`` (``strategies.base``)."""

    def __init__(self, strategy: MessageStrategy) -> None:
        self.strategy = strategy
        self._released: tuple[dict, ArrayRecord] | None = None  # the last aggregate, as the record it came in

    def start(self, grid: Grid, context: Context, node_of_partition: Mapping[int, int]) -> None:
        pass  # nothing lives across rounds but the global model

    def _arrays(self, current: Round) -> ArrayRecord:
        # The aggregate goes out again as the very record the strategy returned, as Flower's own loop does.
        if self._released is not None and self._released[0] is current.state:
            return self._released[1]
        return ArrayRecord(current.state)

    def play_round(self, current: Round) -> RoundResult:
        strategy, server_round, grid = self.strategy, current.number, current.grid
        arrays = self._arrays(current)
        messages = list(strategy.configure_train(server_round, arrays, ConfigRecord(), grid))
        fits = ReplyRecorder(current, "fit")

        def on_fit_reply(reply: Message) -> None:
            fits(reply)
            current.client_done(not reply.has_error())

        replies = collect_replies(grid, messages, current.timeout, on_fit_reply)
        fits.record_missing(messages, replies)
        aggregated, _ = strategy.aggregate_train(server_round, replies)
        state = None
        if aggregated is not None:
            arrays, state = aggregated, aggregated.to_torch_state_dict()
            self._released = (state, aggregated)

        evaluate_messages = list(strategy.configure_evaluate(server_round, arrays, ConfigRecord(), grid))
        if evaluate_messages:
            client_eval = ReplyRecorder(current, "client_eval")
            eval_replies = collect_replies(grid, evaluate_messages, current.timeout, client_eval)
            client_eval.record_missing(evaluate_messages, eval_replies)

        return RoundResult(
            state, {"clients_ok": fits.ok, "clients_failed": fits.failed, "model_updated": aggregated is not None}
        )
