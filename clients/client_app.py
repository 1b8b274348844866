"""The Flower ClientApp (Message API): local training and local evaluation of the global model.

The app is built by a factory around a ``ClientSpec`` (the sections a client reads, run directory,
partitions; ``fedsim.engine.assembly.client_spec`` takes them from a run's config) and is
pickled into every Ray actor. Data and model are built once per actor process and reused across
rounds. What a client sends back is its weights and a few metrics; what it trained on goes to the
run's ground-truth store, never into the reply.
"""

from __future__ import annotations

import copy
import functools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import nn

import fedsim.core.wire as wire
from adversary.privacy_audit.canaries import CarriedCanaries, ExampleCanaries
from clients.defenses import DefenseContext
from clients.defenses.base import TrainingContext
from clients.defenses.pipeline import apply_update_defenses, pseudo_gradient, update_level, weights_to_send
from clients.failures import FailureSchedule, data_poisoned
from clients.mods import failure_mods, partition_of
from clients.training import NonFiniteUpdateError, TrainingSettings, train_locally
from fedsim.core.devices import resolve_device
from fedsim.core.evaluation import evaluate
from fedsim.core.seeding import derive_seed
from fedsim.data import ChannelStats, DataConfig, load_dataset
from fedsim.models import ModelConfig, build_run_model
from fedsim.rundir.ground_truth import GroundTruthStore
from fedsim.rundir.layout import CLIENT_STATE_DIR
from strategies.dp import DpConfig, client_mods


class ClientSettings(TrainingSettings, Protocol):
    """What a client reads of the ``client`` section beyond its local training."""

    verify_model: bool  # refuse a served model whose architecture is not the agreed one

    @property
    def dp_compatible_model(self) -> bool:
        """Whether the model is built with Opacus' layer replacements (as everyone builds it)."""


@dataclass(frozen=True)
class ClientSpec:
    """Everything a simulated client process needs to rebuild its local state: the run's sections it reads,
    its run directory and the data's partitions and shape."""

    run_dir: Path
    partitions: tuple[np.ndarray, ...]
    stats: tuple[ChannelStats, ...]
    num_classes: int
    channels: int
    image_size: int
    seed: int  # the run's seed: data loading, training and defenses derive theirs from it
    data: DataConfig
    model: ModelConfig
    client: ClientSettings
    rounds: int  # federation.rounds
    device: str  # the run's device, used where the client reserved a GPU share (``gpus``)
    gpus: float  # federation.client_resources.gpus
    failures: FailureSchedule
    dp: DpConfig | None  # strategy.dp: its client-side clipping runs in the client
    ground_truth: bool  # output.ground_truth: record what each client trained on
    example_canaries: ExampleCanaries | None = None  # adversary.privacy_audit at example level: the host's canaries
    canary_clients: CarriedCanaries | None = None  # adversary.privacy_audit at client level under SecAgg+

    @property
    def cache_key(self) -> str:
        return str(self.run_dir)


@dataclass
class _LocalState:
    model: nn.Module
    device: torch.device
    data: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    reference: nn.Module | None = None  # the global model of the round, for defenses that need it (Soteria)


# One entry per run per actor process: data set and model are built once, not every round.
_STATE: dict[str, _LocalState] = {}


def client_device(device: str, gpus: float) -> torch.device:
    """A client only uses a GPU (``device``) when it reserved a share of one (federation.client_resources.gpus)."""
    if gpus == 0:
        return torch.device("cpu")
    return resolve_device(device)


def _local_state(spec: ClientSpec) -> _LocalState:
    state = _STATE.get(spec.cache_key)
    if state is None:
        device = client_device(spec.device, spec.gpus)
        # Weights arrive from the server every round; the local copy only needs the architecture.
        model = build_run_model(
            spec.model, spec, seed=0, with_weights=False, dp_compatible=spec.client.dp_compatible_model
        ).to(device)
        state = _STATE[spec.cache_key] = _LocalState(model=model, device=device)
    return state


def _client_data(spec: ClientSpec, state: _LocalState, partition: int) -> tuple[torch.Tensor, torch.Tensor]:
    if partition not in state.data:
        dataset = load_dataset(spec.data, spec.seed)
        ids = spec.partitions[partition]
        x = spec.stats[partition].normalize(torch.from_numpy(dataset.x_train[ids]))
        state.data[partition] = (x, torch.from_numpy(dataset.y_train[ids]))
    return state.data[partition]


def _load_global(state: _LocalState, message: Message) -> None:
    weights = message.content.array_records[wire.ARRAYS].to_torch_state_dict()
    state.model.load_state_dict(weights)


def _defend_update(
    spec: ClientSpec,
    state: _LocalState,
    model: nn.Module,
    global_params: dict[str, torch.Tensor],
    trained_on: tuple[torch.Tensor, torch.Tensor],
    server_round: int,
    partition: int,
) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """The weights to send: global + the update as shaped by the update-level defenses, with their records."""
    weights = {name: value.detach().clone() for name, value in model.state_dict().items()}
    defenses = spec.client.defenses
    if not update_level(defenses):  # sent as trained, bit for bit
        return weights, {}
    if model is not state.model:  # a model the server sent: its own reference copy
        reference = copy.deepcopy(model)
    else:
        if state.reference is None:
            state.reference = copy.deepcopy(state.model)
        reference = state.reference
    reference.load_state_dict({**weights, **global_params})
    reference.train()
    lr = spec.client.lr

    def context_for(position: int) -> DefenseContext:
        seed = derive_seed(spec.seed, "defense", server_round, partition, position)
        return DefenseContext(
            model=reference,
            x=trained_on[0],
            y=trained_on[1],
            lr=lr,
            generator=torch.Generator().manual_seed(seed),
        )

    defended, records = apply_update_defenses(defenses, pseudo_gradient(global_params, weights, lr), context_for)
    return weights | weights_to_send(global_params, defended, lr), records


@dataclass(frozen=True)
class LocalFit:
    """One client's round: the weights it sends (defenses applied) and the metrics it reports with them."""

    weights: dict[str, torch.Tensor]
    metrics: dict[str, int | float]  # num-examples, train-loss, local-steps, partition-id, defense.<name>.<key>


def fit_locally(
    spec: ClientSpec,
    partition: int,
    server_round: int,
    global_state: dict[str, torch.Tensor],
    served: nn.Module | None = None,
    data: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> LocalFit:
    """Train on the client's partition from the global state and shape the update with its defenses.

    The one training path of every protocol: the Message-API handler below and the legacy SecAgg+
    client (``clients.legacy_client``, which masks what this returns) both call it. Raises on
    failure; ``clients.mods.error_reply_mod`` turns that into the protocol's error reply. ``served``: a
    module the server sent instead of the agreed model; it is trained exactly as the agreed one would be
    (``client.verify_model`` refuses it when its architecture differs). ``data``: normalised images and labels
    to train on instead of the partition's (an attacker rehearsing the clients on public images); their sample
    ids are ``spec.partitions[partition]``.
    """
    state = _local_state(spec)
    model = state.model if served is None else _accept_served(spec, state, served)
    model.load_state_dict(global_state)
    x, y = data if data is not None else _client_data(spec, state, partition)
    global_params = {name: value.detach().clone() for name, value in model.named_parameters()}
    if data_poisoned():  # an injected `nan` failure (clients.mods): goes through the real non-finite-loss check
        x = torch.full_like(x, float("nan"))

    ids = spec.partitions[partition]
    if (
        spec.example_canaries is not None and spec.example_canaries.examples and partition == spec.example_canaries.host
    ):  # black-box audit
        x, y, ids = _with_canary_examples(spec, partition, x, y, ids)
    result = train_locally(
        model,
        x,
        y,
        ids,
        spec.client,
        seed=derive_seed(spec.seed, "train", server_round, partition),
        context=TrainingContext(server_round, spec.rounds, spec.run_dir / CLIENT_STATE_DIR / str(partition)),
        canaries=None
        if spec.example_canaries is None
        else spec.example_canaries.for_round(
            model, partition, server_round, min(spec.client.batch_size, len(x)) / len(x)
        ),
    )
    used = _positions(ids, result.batches)
    weights, defense_records = _defend_update(
        spec, state, model, global_params, (x[used], y[used]), server_round, partition
    )
    check_finite(weights)  # before anything leaves the client (under SecAgg+ the server never sees the values)
    if spec.ground_truth:
        batches, labels = _without_canaries(result.batches, result.labels)
        GroundTruthStore(spec.run_dir).write(server_round, partition, batches, labels)
    metrics = {
        wire.NUM_EXAMPLES: len(x),
        wire.TRAIN_LOSS: result.train_loss,
        wire.LOCAL_STEPS: result.steps,
        wire.PARTITION_ID: partition,
        **result.defense_records,
        **defense_records,
    }
    return LocalFit(weights, metrics)


def _with_canary_examples(
    spec: ClientSpec, partition: int, x: torch.Tensor, y: torch.Tensor, ids: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """The host's data with the audit's included canary examples appended (black-box audit), under ids -1, -2, ..."""
    assert spec.example_canaries is not None
    dataset = load_dataset(spec.data, spec.seed)
    images = spec.stats[partition].normalize(torch.from_numpy(dataset.x_test))
    extra_x, extra_y = spec.example_canaries.example_set(
        images, torch.from_numpy(dataset.y_test), spec.num_classes
    ).inserted()
    extra_ids = -1 - np.arange(len(extra_x))
    return torch.cat([x, extra_x.to(x.dtype)]), torch.cat([y, extra_y.to(y.dtype)]), np.concatenate([ids, extra_ids])


def _without_canaries(batches: list[list[int]], labels: list[list[int]]) -> tuple[list[list[int]], list[list[int]]]:
    """What the ground-truth store records: the data set's own samples (canary examples have negative ids)."""
    kept = [[position for position, sample in enumerate(batch) if sample >= 0] for batch in batches]
    return (
        [[batch[p] for p in positions] for batch, positions in zip(batches, kept, strict=True)],
        [[label[p] for p in positions] for label, positions in zip(labels, kept, strict=True)],
    )


class ModelVerificationError(RuntimeError):
    """The server sent a model whose architecture is not the agreed one (client.verify_model)."""


def architecture_difference(agreed: nn.Module, served: nn.Module) -> str | None:
    """How ``served`` differs from ``agreed`` (class, parameter and buffer names and shapes), or None."""
    if type(served) is not type(agreed):
        return f"a {type(served).__name__} instead of a {type(agreed).__name__}"
    want = {name: tuple(value.shape) for name, value in agreed.state_dict().items()}
    got = {name: tuple(value.shape) for name, value in served.state_dict().items()}
    if want != got:
        extra, missing = sorted(set(got) - set(want)), sorted(set(want) - set(got))
        if extra or missing:
            return f"tensors {extra[:3]} added, {missing[:3]} missing"
        changed = next(name for name in want if want[name] != got[name])
        return f"'{changed}' has shape {got[changed]} instead of {want[changed]}"
    if repr(served) != repr(agreed):
        return "the same tensors in other layers"
    return None


def _accept_served(spec: ClientSpec, state: _LocalState, served: nn.Module) -> nn.Module:
    if spec.client.verify_model:
        difference = architecture_difference(state.model, served)
        if difference is not None:
            raise ModelVerificationError(f"refused the server's model (client.verify_model): {difference}")
    else:
        _say_it_trusts_the_server()
    return served.to(state.device)


@functools.cache  # once per client process
def _say_it_trusts_the_server() -> None:
    logging.getLogger("fedsim").warning(
        "client.verify_model is false: this client trains whatever architecture the server names among those it "
        "can build (no code from the server is run)"
    )


def check_finite(weights: dict[str, torch.Tensor]) -> None:
    """Raise ``NonFiniteUpdateError`` naming the first tensor with NaN or infinite values."""
    for name, value in weights.items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            bad = int((~torch.isfinite(value)).sum())
            raise NonFiniteUpdateError(
                f"the update is not finite: {bad} of {value.numel()} values of '{name}' are NaN or infinite"
            )


def train_step(spec: ClientSpec, message: Message, context: Context) -> Message:
    """Handle one `train` message: load the global weights, train locally, reply with the new weights."""
    config = message.content[wire.CONFIG]
    server_round = int(cast(int, config[wire.SERVER_ROUND]))
    served = served_model(spec, config[wire.SERVED_MODEL]) if wire.SERVED_MODEL in config else None
    global_state = message.content.array_records[wire.ARRAYS].to_torch_state_dict()
    fit = fit_locally(spec, partition_of(context), server_round, global_state, served)
    content = RecordDict(
        {wire.ARRAYS: ArrayRecord(fit.weights), wire.METRICS: MetricRecord(cast(dict[str, Any], fit.metrics))}
    )
    return Message(content, reply_to=message)


def served_model(spec: ClientSpec, payload: object) -> nn.Module:
    """The module the server's description names, built by this client's own code around its agreed model
    (``adversary.modifications.served``): nothing the server sends is unpickled or run. ``client.verify_model``
    then refuses it unless it is the agreed architecture."""
    from adversary.modifications.served import rebuild

    return rebuild(payload, _local_state(spec).model, (spec.channels, spec.image_size, spec.image_size))


def _positions(partition_ids: np.ndarray, batches: list[list[int]]) -> torch.Tensor:
    """Rows of the client's data behind the sample ids it trained on this round (each once, in id order)."""
    used = np.unique(np.concatenate([np.asarray(batch, dtype=np.int64) for batch in batches]))
    order = np.argsort(partition_ids)
    return torch.from_numpy(order[np.searchsorted(partition_ids, used, sorter=order)])


def evaluate_step(spec: ClientSpec, message: Message, context: Context) -> Message:
    """Handle one `evaluate` message: score the global model on the client's own data."""
    partition = partition_of(context)
    state = _local_state(spec)
    _load_global(state, message)
    x, y = _client_data(spec, state, partition)
    scores = evaluate(state.model, x, y, spec.num_classes)
    metrics = MetricRecord(
        {
            wire.NUM_EXAMPLES: len(x),
            "loss": scores["loss"],
            "accuracy": scores["accuracy"],
            wire.PARTITION_ID: partition,
        }
    )
    return Message(RecordDict({wire.METRICS: metrics}), reply_to=message)


def identify(message: Message, context: Context) -> Message:
    """Answer the server's roll call with this node's partition id."""
    identity = MetricRecord({wire.PARTITION_ID: partition_of(context)})
    return Message(RecordDict({wire.IDENTITY: identity}), reply_to=message)


def build_client_app(spec: ClientSpec) -> ClientApp:
    # Every handler runs inside the failure mods (clients.mods): errors become failed replies, and
    # federation.failures fire. Under strategy.dp with client-side clipping, Flower's clipping mod
    # wraps training, so it clips what is sent.
    app = ClientApp(mods=failure_mods(spec.failures, spec.run_dir))
    app.train(mods=client_mods(spec.dp))(lambda message, context: train_step(spec, message, context))
    app.evaluate()(lambda message, context: evaluate_step(spec, message, context))
    app.query()(identify)
    return app
