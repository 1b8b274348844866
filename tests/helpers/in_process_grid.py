"""A Flower Grid over an in-process federation: each pushed message, serialised as on the wire, is handed to a
ClientApp in a thread, and the replies are collected, as Flower's SuperLink would."""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Callable, Iterable
from types import SimpleNamespace

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid

from fedsim.core.flower_private import message_serde
from fedsim.core.messaging import collect_replies

message_to_proto, message_from_proto, ProtoMessage = message_serde()  # a copy as the wire would carry it


class InProcessGrid(Grid):
    """Nodes ``first_node + p`` for each partition ``p`` of ``partitions``, answered by ``app``; ``sent`` holds a
    copy of every message pushed."""

    def __init__(self, app: ClientApp, partitions: Iterable[int], first_node: int) -> None:
        self.app = app
        self.contexts = {
            first_node + p: Context(
                run_id=1, node_id=first_node + p, node_config={"partition-id": p}, state=RecordDict(), run_config={}
            )
            for p in partitions
        }
        self.sent: list[Message] = []
        self._replies: dict[str, Message] = {}
        self._unpulled: dict[str, int] = {}  # message id -> its node, until its reply is pulled
        self._lock = threading.Lock()

    def set_run(self, run) -> None:  # type: ignore[no-untyped-def]
        pass

    @property
    def run(self):  # type: ignore[no-untyped-def,override]
        return SimpleNamespace(run_id=1)  # the legacy workflow's client proxies name the run

    def create_message(self, *args, **kwargs) -> Message:  # type: ignore[no-untyped-def,override]
        raise NotImplementedError

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def _deliver(self, message_id: str, wire: bytes) -> None:
        received = message_from_proto(ProtoMessage.FromString(wire))
        try:
            reply = self.app(received, self.contexts[received.metadata.dst_node_id])
        except Exception as error:  # what Flower's simulation does with a ClientApp that raises
            reply = Message(Error(code=0, reason=repr(error)), reply_to=received)
        reply = message_from_proto(message_to_proto(reply))
        with self._lock:
            self._replies[message_id] = reply

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = message_id = str(uuid.uuid4())
            self.sent.append(message_from_proto(message_to_proto(message)))
            wire = message_to_proto(message).SerializeToString()  # serialised now, as the SuperLink would
            with self._lock:
                self._unpulled[message_id] = message.metadata.dst_node_id
            threading.Thread(target=self._deliver, args=(message_id, wire), daemon=True).start()
            ids.append(message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        with self._lock:
            pulled = [i for i in list(message_ids) if i in self._replies]
            for i in pulled:
                self._unpulled.pop(i, None)
            return [self._replies.pop(i) for i in pulled]

    def clock_past_deadlines_once_only(self, silent: Iterable[int]) -> Callable[[], float]:
        """A reply clock (``fedsim.core.messaging.now``) that stands still while a message to a node outside
        ``silent`` waits for its reply to be pulled, and is past every deadline once only ``silent`` nodes' are
        left: a silent node always misses the deadline and every other node always makes it, however busy the
        machine is."""
        silent = set(silent)

        def clock() -> float:
            with self._lock:
                waiting = any(node not in silent for node in self._unpulled.values())
            return 0.0 if waiting else math.inf

        return clock

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return collect_replies(self, messages, timeout)
