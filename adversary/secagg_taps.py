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
from typing import cast

import numpy as np
import torch
from flwr.app import Message
from flwr.common import FitIns, FitRes, NDArrays, Parameters, Scalar, bytes_to_ndarray, parameters_to_ndarrays
from flwr.common.secure_aggregation.quantization import dequantize
from flwr.common.secure_aggregation.secaggplus_constants import Key, Stage
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.serverapp import Grid

import fedsim.core.wire as wire
from adversary.taps import (
    ClientReport,
    ListeningStrategy,
    RoundFilter,
    Sink,
    TappedUpdate,
    WireTap,
    every_round,
    tapped_update,
)
from fedsim.core.flower_private import recorddict_compat
from strategies.base import LegacyStrategy

Layout = Mapping[str, Sequence[int]]  # the architecture's state_dict names and shapes, in the order arrays travel


def _named(arrays: Sequence[np.ndarray], layout: Layout) -> dict[str, torch.Tensor]:
    return {
        name: torch.as_tensor(np.array(array, dtype=np.float32)).reshape(tuple(shape))
        for (name, shape), array in zip(layout.items(), arrays, strict=True)
    }


def decode_masked_vector(
    masked: Sequence[np.ndarray], num_examples: int, clipping_range: float, quantization_range: int, max_weight: float
) -> NDArrays:
    """Read a client's masked vector as one would read it unmasked: what an eavesdropper can make of it.

    A client sends ``[q(w), q(w * params)] + masks mod 2^32`` with ``w = num_examples / max_weight``
    and ``q`` the quantiser; the first array is the masked weight factor, dropped here (the count is in
    clear anyway). An honest ``q`` lies in ``[0, quantization_range)``, so the entries are reduced into
    that range, dequantised and divided by ``w``. The masks are uniform mod 2^32 and the quantisation
    range divides 2^32, so the result is uniform noise over ``+-clipping_range / w``, whatever the update.
    """
    ratio = round(num_examples / max_weight * quantization_range) / quantization_range
    body = [np.asarray(array) % quantization_range for array in masked[1:]]
    return [array / ratio for array in dequantize(body, clipping_range, quantization_range)]


class LegacyStrategyTap(ListeningStrategy):
    """Wraps a legacy strategy: sees what SecAggPlusWorkflow gives it to aggregate, and what it releases.

    Everything else of the strategy contract is forwarded as it is.
    """

    strategy: LegacyStrategy

    def __init__(self, strategy: LegacyStrategy, sink: Sink, layout: Layout, wants: RoundFilter = every_round) -> None:
        super().__init__(strategy, sink, wants)
        self._layout = dict(layout)  # the legacy path sends unnamed arrays, in state_dict order
        self._round_layouts: dict[int, dict[str, Sequence[int]]] = {}  # rounds whose model is not the agreed one

    def set_round_layout(self, server_round: int, layout: Layout) -> None:
        """The arrays of ``server_round`` are another module's (a malicious server's modification)."""
        self._round_layouts[server_round] = dict(layout)

    # --- forwarded
    def summed_vectors(self, server_round: int) -> int | None:
        return self.strategy.summed_vectors(server_round)

    # --- listening
    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        if self._wants(server_round):
            layout = self._round_layouts.get(server_round, self._layout)
            self._global[server_round] = _named(parameters_to_ndarrays(parameters), layout)
        return self.strategy.configure_fit(server_round, parameters, client_manager)

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        if server_round not in self._global:
            return self.strategy.aggregate_fit(server_round, results, failures)
        global_state = self._global.pop(server_round)
        layout = self._round_layouts.pop(server_round, self._layout)
        reports = [(ClientReport.from_metrics(fit.metrics, fit.num_examples), fit) for _, fit in results]
        payloads: dict[tuple[bytes, ...], list[tuple[ClientReport, FitRes]]] = {}
        for report, fit in reports:
            payloads.setdefault(tuple(fit.parameters.tensors), []).append((report, fit))
        if len(payloads) > 1:  # a payload of one client's own: an individual update reached the strategy
            for group in payloads.values():
                if len(group) == 1:
                    report, fit = group[0]
                    observed = _named(parameters_to_ndarrays(fit.parameters), layout)
                    self._sink(
                        tapped_update("server", server_round, global_state, observed, [report], counts_in_clear=True)
                    )
        aggregated, metrics = self.strategy.aggregate_fit(server_round, results, failures)
        if aggregated is not None:
            behind = sorted((report for report, _ in reports), key=lambda report: report.client)
            observed = _named(parameters_to_ndarrays(aggregated), layout)
            self._sink(
                tapped_update(
                    "server", server_round, global_state, observed, behind, aggregate=True, counts_in_clear=True
                )
            )
        return aggregated, metrics


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
            stage = wire.stage_of(message)
            if stage is None or not self._wants(server_round := wire.round_of(message)):
                continue
            if stage == Stage.SETUP:
                settings = message.content.config_records[wire.SECAGG_RECORD]
                self._settings[server_round] = (
                    float(cast(float, settings[Key.CLIPPING_RANGE])),
                    int(cast(int, settings[Key.TARGET_RANGE])),
                    float(cast(float, settings[Key.MAX_WEIGHT])),
                )
                self._globals = {r: state for r, state in self._globals.items() if r >= server_round}
            elif stage == Stage.COLLECT_MASKED_VECTORS:
                if server_round not in self._globals:  # one copy per round: every client gets the same model
                    fitins = recorddict_compat().recorddict_to_fitins(message.content, keep_input=True)
                    self._globals[server_round] = _named(parameters_to_ndarrays(fitins.parameters), self._layout)
                watched.add(position)
        ids = list(self._grid.push_messages(messages))
        with self._lock:
            for position, message_id in enumerate(ids):
                if position in watched:
                    server_round = wire.round_of(messages[position])
                    self._sent[message_id] = (server_round, self._globals[server_round])
        return ids

    def _update(self, server_round: int, global_state: dict[str, torch.Tensor], reply: Message) -> TappedUpdate:
        content = reply.content
        num_examples = int(cast(int, content.metric_records[wire.FIT_NUM_EXAMPLES]["num_examples"]))
        report = ClientReport.from_metrics(content.config_records[wire.FIT_METRICS], num_examples)
        masked_parameters = cast(list[bytes], content.config_records[wire.SECAGG_RECORD][Key.MASKED_PARAMETERS])
        masked = [bytes_to_ndarray(b) for b in masked_parameters]
        clipping, quantization, max_weight = self._settings[server_round]
        decoded = decode_masked_vector(masked, num_examples, clipping, quantization, max_weight)
        return tapped_update("mitm", server_round, global_state, _named(decoded, self._layout), [report])
