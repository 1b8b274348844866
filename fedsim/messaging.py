"""Sending messages to simulated clients and collecting the replies as they arrive."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from flwr.app import Message
from flwr.serverapp import Grid

PULL_INTERVAL_S = 0.05


def collect_replies(
    grid: Grid,
    messages: Iterable[Message],
    timeout: float | None,
    on_reply: Callable[[Message], None] = lambda reply: None,
) -> list[Message]:
    """``Grid.send_and_receive``, but handing each reply to ``on_reply`` as soon as it arrives."""
    pending = set(grid.push_messages(messages))
    replies: list[Message] = []
    deadline = None if timeout is None else time.monotonic() + timeout
    while pending and (deadline is None or time.monotonic() < deadline):
        for reply in grid.pull_messages(pending):
            pending.discard(reply.metadata.reply_to_message_id)
            replies.append(reply)
            on_reply(reply)
        if pending:
            time.sleep(PULL_INTERVAL_S)
    return replies
