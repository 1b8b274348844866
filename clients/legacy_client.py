"""The SecAgg+ client: a legacy Flower ``NumPyClient`` behind Flower's ``secaggplus_mod``.

Flower's SecAgg+ runs only on its legacy path, so a SecAgg+ federation uses this ClientApp instead of
the Message-API one (``clients.client_app``). Local training is the same function in both
(``fit_locally``: partition, local training, client defenses, ground truth), so what gets masked is
exactly what a FedAvg client would have sent. The mods around ``secaggplus_mod``, outermost first:

* the server's roll call (a Message-API query the legacy handler does not know) is answered here;
* the failure mods every client app has (``clients.mods``): any exception, Flower's protocol checks
  included, becomes fedsim's one-line error reply, with the traceback in the run's client log, and
  ``federation.failures`` fire before their protocol stage runs (a ``nan`` in the training stage
  poisons the data ``fit_locally`` trains on, like a FedAvg client's);
* numpy's global generator, which Flower's stochastic quantisation draws from, is seeded from
  (seed, round, client) for the stage that quantises, so that a SecAgg+ run repeats (and resumes)
  exactly: the random masks cancel in the sum, the rounding does not.

Under a client-level privacy audit the server hands each sampled client a slot of the canary clients,
which it adds to what it masks (``adversary.privacy_audit.canaries.CarriedCanaries``): the canaries reach the
server only inside the unmasked sum, quantised and masked with the client's own update.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from flwr.app import Context, Message, MessageType
from flwr.client import Client, NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable, Mod
from flwr.common import NDArrays, Scalar

import fedsim.core.wire as wire
from clients.client_app import ClientSpec, _local_state, fit_locally, identify, served_model
from clients.mods import failure_mods, partition_of
from fedsim.core.seeding import derive_seed
from strategies.dp import seeded_numpy


class SecAggClient(NumPyClient):
    """Trains with ``fit_locally``; its parameters travel as the model's state_dict values, in order."""

    def __init__(self, spec: ClientSpec, partition: int) -> None:
        self.spec = spec
        self.partition = partition

    def fit(self, parameters: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, dict[str, Scalar]]:
        served = served_model(self.spec, config[wire.SERVED_MODEL]) if wire.SERVED_MODEL in config else None
        names = list((served if served is not None else _local_state(self.spec).model).state_dict())
        global_state = {name: torch.as_tensor(np.array(array)) for name, array in zip(names, parameters, strict=True)}
        fit = fit_locally(self.spec, self.partition, int(config[wire.SERVER_ROUND]), global_state, served)
        # 0-d arrays travel as 1-element ones: Flower 1.41's unmask rescales the aggregate with `vec += offset`,
        # which rebinds a 0-d array instead of changing it, so a scalar (BatchNorm's num_batches_tracked)
        # would come back un-averaged. The server restores the shapes
        # (fedsim.engine.lifecycle.secagg_protocol.to_state).
        num_examples = int(fit.metrics[wire.NUM_EXAMPLES])
        sent = self._with_canary_clients(fit.weights, config, served, num_examples)
        weights = [np.atleast_1d(sent[name].detach().cpu().numpy()) for name in names]
        return weights, num_examples, dict(fit.metrics)

    def _with_canary_clients(
        self, weights: dict[str, torch.Tensor], config: dict[str, Scalar], served: torch.nn.Module | None, own: int
    ) -> dict[str, torch.Tensor]:
        """``weights`` with the slot of canary clients the server asked this client to carry (as they are without)."""
        carried = self.spec.canary_clients
        if carried is None or wire.CANARY_SLOT not in config:
            return weights
        model = served if served is not None else _local_state(self.spec).model
        added = carried.carried(
            model, int(config[wire.CANARY_SLOT]), int(config[wire.CANARY_SLOTS]), float(config[wire.CANARY_WEIGHT]), own
        )
        return {
            name: (value + added[name].to(value.device, value.dtype) if name in added else value)
            for name, value in weights.items()
        }


def roll_call_mod(message: Message, context: Context, call_next: ClientAppCallable) -> Message:
    if message.metadata.message_type == MessageType.QUERY:
        return identify(message, context)
    return call_next(message, context)


# numpy's generator is global to the process: clients sharing one (threads) quantise one at a time.
_QUANTIZATION_LOCK = threading.Lock()


@contextmanager
def _quantization_seeded(seed: int) -> Iterator[None]:
    # Module-level, so that Ray pickles it by reference: a closure over the lock could not be pickled.
    with _QUANTIZATION_LOCK, seeded_numpy(seed):
        yield


def seeded_quantization_mod(spec: ClientSpec) -> Mod:
    def mod(message: Message, context: Context, call_next: ClientAppCallable) -> Message:
        if wire.stage_of(message) != wire.SECAGG_TRAINING_STAGE:
            return call_next(message, context)
        seed = derive_seed(spec.seed, "secagg-quantize", wire.round_of(message), partition_of(context))
        with _quantization_seeded(seed):
            return call_next(message, context)

    return mod


def secagg_client_mods(spec: ClientSpec) -> list[Mod]:
    return [roll_call_mod, *failure_mods(spec.failures, spec.run_dir), seeded_quantization_mod(spec), secaggplus_mod]


def build_legacy_client_app(spec: ClientSpec) -> ClientApp:
    def client_fn(context: Context) -> Client:
        return SecAggClient(spec, partition_of(context)).to_client()

    return ClientApp(client_fn=client_fn, mods=secagg_client_mods(spec))
