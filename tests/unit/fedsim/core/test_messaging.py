"""Collecting replies: a SuperLink's error for a vanished node counts as its reply."""

from __future__ import annotations

from flwr.app import RecordDict


def test_the_superlinks_error_for_a_vanished_node_counts_as_that_nodes_reply(task_identity):
    """A SuperNode that stops heartbeating gets an error reply from the SuperLink itself (node id 1)."""
    from flwr.app import ConfigRecord, Error, Message

    from fedsim.core.messaging import collect_replies

    to_node = Message(RecordDict({"config": ConfigRecord({"server-round": 2})}), dst_node_id=5, message_type="train")

    class VanishedNodeGrid:
        def push_messages(self, messages):
            for message in messages:
                message.metadata.__dict__["_message_id"] = "m5"  # as Flower's grid stamps a pushed message
            return ["m5"]

        def pull_messages(self, ids):
            stand_in = Message(Error(code=3, reason="Error: Node Unavailable"), reply_to=to_node)
            stand_in.metadata.__dict__["_src_node_id"] = 1  # the SuperLink's node id, as Flower sends it
            return [stand_in]

    seen = []
    replies = collect_replies(VanishedNodeGrid(), [to_node], timeout=5, on_reply=seen.append)
    assert [reply.metadata.src_node_id for reply in seen] == [5] and replies == seen
    assert seen[0].error.reason == "Error: Node Unavailable" and seen[0].metadata.reply_to_message_id == "m5"
