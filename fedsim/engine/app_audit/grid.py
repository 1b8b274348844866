"""The grid an audited app's ServerApp receives: every message forwarded unchanged, the updates copied to the adversary.

Positions: ``mitm`` copies each client's train reply as it travels (the arrays it sent, against the global model it
was sent); ``server`` copies what the server holds: the replies it aggregates and the next global model it releases,
which is the aggregate of the clients that replied (under FedAvg; seen as it goes out, to the next round's clients or
to the evaluating ones). Under the app's SecAgg+ workflow the replies hold masked vectors, and the released model is
the clear aggregate.

Beside each client's reply, the scoring side records which of the app's training images stand behind it (the node's
partition, ``GroundTruthStore``): what that update is scored against. The attacker never reads it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import torch
from flwr.app import ArrayRecord, Message, MessageType
from flwr.common import bytes_to_ndarray
from flwr.common.secure_aggregation.secaggplus_constants import Key, Stage
from flwr.serverapp import Grid

import fedsim.core.wire as wire
from adversary.secagg_taps import decode_masked_vector
from adversary.tap_positions import TAPS
from adversary.taps import ClientReport, RoundFilter, Sink, tapped_update
from fedsim.core.errors import ConfigError
from fedsim.core.messaging import ForwardingGrid, collect_replies

#: where Flower's strategies put the round number of a message (Message API: also in the train config)
ROUND_KEY = wire.SERVER_ROUND
MITM = "mitm"  # the position that sees each client's update as sent (what the privacy audit scores)


@dataclass
class _Round:
    """What the grid saw of one round so far."""

    global_state: dict[str, torch.Tensor]
    reports: list[ClientReport] = field(default_factory=list)  # the clients whose train replies came back
    released: dict[str, torch.Tensor] | None = None  # the global model the round released, once seen


class AppGrid(ForwardingGrid):
    """Wraps the grid of an audited app's ServerApp (see the module docstring); it never changes a message."""

    def __init__(
        self,
        grid: Grid,
        sink: Sink,
        *,
        tap: str,
        wants: RoundFilter,
        partition_of: Callable[[int], int],
        layout: Mapping[str, tuple[int, ...]],
        trained_on: Callable[[int, ClientReport], None],
        round_done: Callable[[int, dict[str, torch.Tensor] | None], object],
        replied: Callable[[int, str, int, dict[str, float | int]], object] = lambda *reply: None,
        audit: Sink | None = None,
    ) -> None:
        """``audit``: the privacy audit's sink, handed every client update sent in clear, every round, whatever the
        adversary's tap and rounds (``fedsim.engine.app_audit.privacy_audit``)."""
        super().__init__(grid)
        self._sink = sink
        self._tap = tap
        self._wants = wants
        self._partition_of = partition_of
        self._layout = dict(layout)
        self._trained_on = trained_on
        self._round_done = round_done
        self._replied = replied
        self._audit = audit
        self._lock = threading.Lock()
        self._sent: dict[str, tuple[int, int]] = {}  # train message id -> (round, partition)
        self._evaluating: dict[str, tuple[int, int]] = {}  # evaluate message id -> (round, partition)
        self._rounds: dict[int, _Round] = {}
        self._finished: set[int] = set()
        self._settings: dict[int, tuple[float, int, float]] = {}  # SecAgg+ round -> clipping, quantisation, weight

    # ------------------------------------------------------------------------------------------ the grid

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        watched: dict[int, tuple[int, int]] = {}  # position -> (round, partition) of the train messages with a model
        evaluating: dict[int, tuple[int, int]] = {}  # position -> (round, partition) of the evaluate messages
        for position, message in enumerate(messages):  # read before forwarding: SecAgg+ clients consume the stage key
            kind = message.metadata.message_type
            if kind not in (MessageType.TRAIN, MessageType.EVALUATE):
                continue
            server_round = message_round(message)
            stage = wire.stage_of(message)
            if stage == Stage.SETUP and server_round is not None:
                self._secagg_settings(server_round, message)
            arrays = single_arrays(message)
            if server_round is None or arrays is None:
                continue  # e.g. the SecAgg+ stages that carry no model
            self._released(server_round, arrays, released_before=kind == MessageType.TRAIN)
            sent = (server_round, self._partition_of(message.metadata.dst_node_id))
            (watched if kind == MessageType.TRAIN else evaluating)[position] = sent
        ids = list(self._grid.push_messages(messages))
        with self._lock:
            for position, sent in watched.items():
                self._sent[ids[position]] = sent
            for position, sent in evaluating.items():
                self._evaluating[ids[position]] = sent
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        replies = list(self._grid.pull_messages(message_ids))
        for reply in replies:
            with self._lock:
                sent = self._sent.pop(reply.metadata.reply_to_message_id, None)
                evaluated = self._evaluating.pop(reply.metadata.reply_to_message_id, None)
            if evaluated is not None and not reply.has_error():
                self._replied(evaluated[0], "client_eval", evaluated[1], reply_scalars(reply))
            if sent is None or reply.has_error():
                continue
            server_round, partition = sent
            arrays = single_arrays(reply)
            masked = masked_vector(reply)
            if arrays is None and masked is None:
                continue
            report = ClientReport(partition, reply_examples(reply), None)
            self._trained_on(server_round, report)  # scoring side: before any attack can ask for it
            self._replied(server_round, "fit", partition, {**reply_scalars(reply), "num_examples": report.num_examples})
            with self._lock:
                known = self._rounds.get(server_round)
                if known is not None:
                    known.reports.append(report)
            if known is not None and arrays is not None and self._audit is not None:
                self._audit(tapped_update(MITM, server_round, known.global_state, self._state(arrays), [report]))
            if known is not None and self._wants(server_round):
                if arrays is not None:
                    observed = self._state(arrays)
                else:
                    assert masked is not None  # a reply with neither was skipped above
                    observed = self._unmasked_view(server_round, masked, report)
                self._sink(tapped_update(self._tap, server_round, known.global_state, observed, [report]))
        return replies

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return collect_replies(self, messages, timeout)  # through this grid's push and pull: nothing bypasses it

    # ------------------------------------------------------------------------------------------ rounds

    def _released(self, server_round: int, arrays: ArrayRecord, *, released_before: bool) -> None:
        """A global model goes out: round ``server_round``'s start (train), or the aggregate of a round that ended."""
        if released_before:  # round r's train messages carry the model released by round r - 1
            self._aggregate(server_round - 1, arrays)
            self._finish_before(server_round)
            with self._lock:
                if server_round not in self._rounds:
                    self._rounds[server_round] = _Round(self._state(arrays))
        else:  # evaluation after round r's aggregation carries its new model
            self._aggregate(server_round, arrays)

    def _aggregate(self, server_round: int, arrays: ArrayRecord) -> None:
        with self._lock:
            known = self._rounds.get(server_round)
            if known is None or known.released is not None or not known.reports:
                return
            known.released = state = self._state(arrays)
            behind = sorted(known.reports, key=lambda report: report.client)
        if TAPS.get(self._tap).holds_aggregate and self._wants(server_round):
            self._sink(tapped_update(self._tap, server_round, known.global_state, state, behind, aggregate=True))

    def _finish_before(self, server_round: int) -> None:
        with self._lock:
            ended = sorted(r for r in self._rounds if r < server_round and r not in self._finished)
            self._finished.update(ended)
        for ended_round in ended:
            self._round_done(ended_round, self._rounds[ended_round].released)

    def finish(self, held: ArrayRecord | None = None) -> None:
        """The app's ServerApp returned: every round it played is over. ``held``: the model the server holds at the
        end (the legacy workflow's state), the last round's release where no message carried it."""
        last = max(self._rounds, default=0)
        if held is not None and last:
            self._aggregate(last, held)
        self._finish_before(last + 1)

    def _secagg_settings(self, server_round: int, message: Message) -> None:
        settings = message.content.config_records[wire.SECAGG_RECORD]
        self._settings[server_round] = (
            float(cast(float, settings[Key.CLIPPING_RANGE])),
            int(cast(int, settings[Key.TARGET_RANGE])),
            float(cast(float, settings[Key.MAX_WEIGHT])),
        )

    def _unmasked_view(
        self, server_round: int, masked: list[np.ndarray], report: ClientReport
    ) -> dict[str, torch.Tensor]:
        """A SecAgg+ client's masked vector read as an unmasked one would be: what the wire shows of its update."""
        clipping, quantization, max_weight = self._settings[server_round]
        decoded = decode_masked_vector(masked, report.num_examples, clipping, quantization, max_weight)
        return {
            name: torch.as_tensor(np.asarray(array, dtype=np.float32)).reshape(shape)
            for (name, shape), array in zip(self._layout.items(), decoded, strict=True)
        }

    def _state(self, arrays: ArrayRecord) -> dict[str, torch.Tensor]:
        """The arrays as a state_dict of the attacker's model: by name, or (legacy API, unnamed) by position."""
        state = {name: tensor.detach().clone() for name, tensor in arrays.to_torch_state_dict().items()}
        if state.keys() == self._layout.keys():
            return state
        values = list(state.values())
        shapes = [tuple(value.shape) for value in values]
        if shapes != list(self._layout.values()):
            raise ConfigError(
                f"model.target: the app sends {len(values)} arrays of shapes {shapes[:3]}..., but the declared model "
                f"has {len(self._layout)} of shapes {list(self._layout.values())[:3]}...; declare the app's own model"
            )
        return dict(zip(self._layout, values))


def message_round(message: Message) -> int | None:
    """The round a message belongs to: its group id (Flower's strategies set it), else its config's server-round."""
    group = message.metadata.group_id
    if group and group.isdigit():
        return int(group)
    for record in message.content.config_records.values():
        if ROUND_KEY in record:
            return int(cast(int, record[ROUND_KEY]))
    return None


def single_arrays(message: Message) -> ArrayRecord | None:
    """The one ArrayRecord a train message or reply carries (the model); None where there is none (empty records, as
    SecAgg+'s stages other than training carry, do not count)."""
    records = [record for record in message.content.array_records.values() if len(record)]
    return records[0] if len(records) == 1 else None


def reply_examples(reply: Message) -> int:
    """The sample count a client states beside its update (Message API metrics, or a legacy FitRes)."""
    records = reply.content.metric_records
    if wire.FIT_NUM_EXAMPLES in records:  # the legacy API's FitRes.num_examples (SecAgg+ sends it in clear too)
        return int(cast(int, records[wire.FIT_NUM_EXAMPLES]["num_examples"]))
    for record in records.values():
        if wire.NUM_EXAMPLES in record:
            return int(cast(int, record[wire.NUM_EXAMPLES]))
    return 0


def reply_scalars(reply: Message) -> dict[str, float | int]:
    """The numbers a client reported beside its reply (its metric records, e.g. ``train_loss``, ``epsilon``), named
    as rows name fields (``num-examples`` -> ``num_examples``); lists and the legacy FitRes count are left out."""
    scalars: dict[str, float | int] = {}
    for name, record in reply.content.metric_records.items():
        if name == wire.FIT_NUM_EXAMPLES:
            continue
        for key, value in record.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                scalars[key.replace("-", "_")] = value
    return scalars


def masked_vector(reply: Message) -> list[np.ndarray] | None:
    """The masked vector of a SecAgg+ client's collect-masked-vectors reply (None for any other reply)."""
    record = reply.content.config_records.get(wire.SECAGG_RECORD)
    if record is None or Key.MASKED_PARAMETERS not in record:
        return None
    return [bytes_to_ndarray(value) for value in cast(list[bytes], record[Key.MASKED_PARAMETERS])]
