"""What the two taps see under SecAgg+ (Flower's legacy path), exactly.

* ``server`` (honest-but-curious): ``LegacyStrategyTap`` wraps the legacy strategy, so it receives
  what ``SecAggPlusWorkflow`` hands the strategy and nothing else: one ``FitRes`` per contributor,
  with its sample count and metrics in clear and, as parameters, the unmasked aggregate. It reports
  one update per distinct parameter payload: a client's own update only if a payload was one client's
  alone (never under SecAgg+), and the aggregate the strategy releases, with the clear sample counts.
* ``mitm`` (on the wire): ``MaskedWireTap`` reads the public protocol settings from the setup
  messages, the global model from each client's collect-masked-vectors message, and the masked vector
  in its reply, decoded the way an unmasked one would be (``decode_masked_vector``): uniform noise
  over the parameter range, which is what an attack on it is up against.

Both only copy; no message or result is changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from flwr.app import Message
from flwr.common import FitIns, FitRes, Parameters, Scalar, bytes_to_ndarray, parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from flwr.compat.common import recorddict_compat as compat
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.serverapp import Grid

from strategies.secagg import decode_masked_vector, round_of, stage_of
from strategies.taps import AGGREGATE, RoundFilter, Sink, TappedUpdate, WireTap, every_round

FIT_METRICS = "fitres.metrics"  # where Flower's legacy FitRes puts a client's metrics (in clear)
FIT_NUM_EXAMPLES = "fitres.num_examples"


Layout = Mapping[str, Sequence[int]]  # the architecture's state_dict names and shapes, in the order arrays travel


def _named(arrays: Sequence[np.ndarray], layout: Layout) -> dict[str, torch.Tensor]:
    return {
        name: torch.as_tensor(np.array(array, dtype=np.float32)).reshape(tuple(shape))
        for (name, shape), array in zip(layout.items(), arrays, strict=True)
    }


class LegacyStrategyTap:
    """Wraps a legacy strategy: sees what SecAggPlusWorkflow gives it to aggregate, and what it releases."""

    def __init__(self, strategy: Any, sink: Sink, layout: Layout, wants: RoundFilter = every_round) -> None:
        self._strategy = strategy
        self._sink = sink
        self._layout = dict(layout)
        self._wants = wants
        self._global: dict[int, dict[str, torch.Tensor]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._strategy, name)

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        if self._wants(server_round):
            self._global[server_round] = _named(parameters_to_ndarrays(parameters), self._layout)
        return self._strategy.configure_fit(server_round, parameters, client_manager)

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        if server_round not in self._global:
            return self._strategy.aggregate_fit(server_round, results, failures)
        global_state = self._global.pop(server_round)
        clients = [(int(fit.metrics["partition-id"]), fit) for _, fit in results]
        payloads: dict[tuple[bytes, ...], list[tuple[int, FitRes]]] = {}
        for client, fit in clients:
            payloads.setdefault(tuple(fit.parameters.tensors), []).append((client, fit))
        if len(payloads) > 1:  # a payload of one client's own: an individual update reached the strategy
            for group in payloads.values():
                if len(group) == 1:
                    client, fit = group[0]
                    self._sink(self._update(server_round, f"client:{client}", global_state, fit.parameters, [(client, fit)]))
        aggregated, metrics = self._strategy.aggregate_fit(server_round, results, failures)
        if aggregated is not None:
            self._sink(self._update(server_round, AGGREGATE, global_state, aggregated, sorted(clients, key=lambda c: c[0])))
        return aggregated, metrics

    def _update(
        self, server_round: int, source: str, global_state: dict[str, torch.Tensor], parameters: Parameters,
        behind: list[tuple[int, FitRes]],
    ) -> TappedUpdate:
        steps = behind[0][1].metrics.get("local-steps") if len(behind) == 1 else None
        return TappedUpdate(
            round=server_round,
            tap="server",
            source=source,
            global_state=global_state,
            observed_state=_named(parameters_to_ndarrays(parameters), self._layout),
            num_examples=sum(fit.num_examples for _, fit in behind),
            local_steps=int(steps) if steps is not None else None,
            contributors=tuple(client for client, _ in behind),
            contributor_examples=tuple(fit.num_examples for _, fit in behind),
        )


class MaskedWireTap(WireTap):
    """A Grid that forwards every SecAgg+ stage and copies each masked vector, decoded, to the sink."""

    def __init__(self, grid: Grid, sink: Sink, layout: Layout, wants: RoundFilter = every_round) -> None:
        super().__init__(grid, sink, wants)
        self._layout = dict(layout)
        self._settings: dict[int, tuple[float, int, float]] = {}  # round -> clipping, quantisation, max weight
        self._globals: dict[int, dict[str, torch.Tensor]] = {}  # round -> the global model sent for training

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        watched: set[int] = set()  # positions of the collect-masked-vectors messages of attacked rounds
        for position, message in enumerate(messages):  # read before forwarding: clients consume the stage key
            stage = stage_of(message)
            if stage is None or not self._wants(server_round := round_of(message)):
                continue
            if stage == Stage.SETUP:
                settings = message.content.config_records[RECORD_KEY_CONFIGS]
                self._settings[server_round] = (
                    float(settings[Key.CLIPPING_RANGE]), int(settings[Key.TARGET_RANGE]), float(settings[Key.MAX_WEIGHT])
                )
                self._globals = {r: state for r, state in self._globals.items() if r >= server_round}
            elif stage == Stage.COLLECT_MASKED_VECTORS:
                if server_round not in self._globals:  # one copy per round: every client gets the same model
                    fitins = compat.recorddict_to_fitins(message.content, keep_input=True)
                    self._globals[server_round] = _named(parameters_to_ndarrays(fitins.parameters), self._layout)
                watched.add(position)
        ids = list(self._grid.push_messages(messages))
        with self._lock:
            for position, message_id in enumerate(ids):
                if position in watched:
                    server_round = round_of(messages[position])
                    self._sent[message_id] = (server_round, self._globals[server_round])
        return ids

    def _update(self, server_round: int, global_state: dict[str, torch.Tensor], reply: Message) -> TappedUpdate:
        content = reply.content
        metrics = content.config_records[FIT_METRICS]
        num_examples = int(content.metric_records[FIT_NUM_EXAMPLES]["num_examples"])
        masked = [bytes_to_ndarray(b) for b in content.config_records[RECORD_KEY_CONFIGS][Key.MASKED_PARAMETERS]]
        clipping, quantization, max_weight = self._settings[server_round]
        decoded = decode_masked_vector(masked, num_examples, clipping, quantization, max_weight)
        client = int(metrics["partition-id"])
        steps = metrics.get("local-steps")
        return TappedUpdate(
            round=server_round,
            tap="mitm",
            source=f"client:{client}",
            global_state=global_state,
            observed_state=_named(decoded, self._layout),
            num_examples=num_examples,
            local_steps=int(steps) if steps is not None else None,
            contributors=(client,),
        )
