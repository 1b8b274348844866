"""Sending messages to simulated clients: collecting replies as they arrive, and wrapping a Grid."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from flwr.app import Message
from flwr.serverapp import Grid

PULL_INTERVAL_S = 0.05
#: The clock reply deadlines are read on: a test of a client that falls silent puts in one it moves itself, so that
#: which clients miss the deadline depends on whether they answer, never on how busy the machine is.
now: Callable[[], float] = time.monotonic


def collect_replies(
    grid: Grid,
    messages: Iterable[Message],
    timeout: float | None,
    on_reply: Callable[[Message], None] = lambda reply: None,
) -> list[Message]:
    """``Grid.send_and_receive``, but handing each reply to ``on_reply`` as soon as it arrives.

    Every reply comes from the node its message went to: a SuperLink answers a message for a node that stopped
    sending heartbeats (a SuperNode that disconnected) with an error reply of its own, sent from the SuperLink's
    node id; that error is handed on as the node's, as a node's own failure would be.
    """
    messages = list(messages)
    ids = list(grid.push_messages(messages))
    sent = dict(zip(ids, messages))
    pending = set(ids)
    replies: list[Message] = []
    deadline = None if timeout is None else now() + timeout
    while pending and (deadline is None or now() < deadline):
        for reply in grid.pull_messages(pending):
            pending.discard(reply.metadata.reply_to_message_id)
            reply = _from_destination(reply, sent.get(reply.metadata.reply_to_message_id))
            replies.append(reply)
            on_reply(reply)
        if pending:
            time.sleep(PULL_INTERVAL_S)
    return replies


def _from_destination(reply: Message, message: Message | None) -> Message:
    if message is None or not reply.has_error() or reply.metadata.src_node_id == message.metadata.dst_node_id:
        return reply
    return Message(reply.error, reply_to=message)  # the SuperLink's stand-in error, as the node's own


class ForwardingGrid(Grid):
    """A Grid that hands every call to the grid it wraps; subclasses override what they watch or change.

    The one pass-through for whatever sits between the server and its grid (the adversary's wire
    taps, the SecAgg+ protocol monitor), so that none of them forgets a method of Flower's Grid.
    """

    def __init__(self, grid: Grid) -> None:
        self._grid = grid

    @property
    def wrapped(self) -> Grid:
        return self._grid

    def set_run(self, run: Any) -> None:
        self._grid.set_run(run)

    @property
    def run(self) -> Any:
        return self._grid.run

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        return self._grid.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:
        return self._grid.get_node_ids()

    def get_nodes(self) -> Iterable[Any]:
        return self._grid.get_nodes()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self._grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self._grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self._grid.send_and_receive(messages, timeout=timeout)
