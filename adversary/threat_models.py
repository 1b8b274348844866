"""From tapped updates to attacker views, under what ``adversary.knows`` grants.

This is the only place where the threat model is decided: which updates become targets
(per client, aggregate), how many samples the attacker assumes, and which hyperparameters or
labels it is given. Labels are granted through a callable the caller provides only when the
config says the attacker knows them; nothing here can reach the ground-truth store otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, cast

import torch
from torch import nn

from adversary.taps import AGGREGATE, TappedUpdate
from adversary.view import AttackerView, LocalTraining

# (round, client, number of samples) -> their labels, in training order; only when labels are granted.
LabelGrant = Callable[[int, int, int], torch.Tensor]
# the sample counts of an aggregate's contributors (sent in clear) -> the standard deviation of the noise the
# aggregation protocol put into each entry of it, from the protocol's public parameters (SecAgg+'s quantisation)
AggregateNoise = Callable[[Sequence[int]], float]


class Knowledge(Protocol):
    """What the threat model grants the attacker (``adversary.knows``)."""

    @property
    def local_training(self) -> bool:
        """The victims' lr, local steps and batch size."""

    @property
    def num_samples(self) -> bool:
        """The number of samples behind each update."""

    @property
    def bn_statistics(self) -> bool:
        """BatchNorm statistics of the victims' batches."""


class ThreatModel(Protocol):
    """What the views of a round read of the ``adversary`` section: where it taps, what it inverts, what it knows."""

    @property
    def tap(self) -> str:
        """The tap position (``adversary.tap_positions``)."""

    @property
    def targets(self) -> str:
        """per-client, aggregate or both."""

    @property
    def knows(self) -> Knowledge:
        """What the threat model grants."""

    def attacks_client(self, client: int) -> bool:
        """Whether the updates of partition ``client`` are attacked."""


@dataclass(frozen=True)
class Architecture:
    """What every participant knows about the model and its inputs (the server distributes both)."""

    model: nn.Module
    input_shape: tuple[int, int, int]
    num_classes: int
    input_bounds: tuple[torch.Tensor, torch.Tensor] | None  # valid inputs, from the public normalisation


@dataclass(frozen=True)
class TrainingHyperparameters:
    """The clients' configured local training; granted when adversary.knows.local_training."""

    lr: float
    batch_size: int
    local_steps: int | None  # None when clients train for epochs (steps follow from their sample count)
    local_epochs: int | None
    momentum: float = 0.0  # SGD momentum (the only optimizer an attacker simulates; adam is refused in the config)
    weight_decay: float = 0.0


def _client_id(update: TappedUpdate) -> int:
    return int(update.source.split(":", 1)[1])


def _steps(update: TappedUpdate, training: TrainingHyperparameters) -> int:
    if update.local_steps is not None:
        return update.local_steps
    if training.local_steps is not None:
        return training.local_steps
    per_epoch = -(-update.num_examples // training.batch_size)
    return per_epoch * (training.local_epochs or 1)


def samples_behind(update: TappedUpdate, config: ThreatModel, training: TrainingHyperparameters) -> int:
    """How many distinct samples the attacker reconstructs for one client's update."""
    knows = config.knows
    if knows.num_samples and knows.local_training:
        return min(update.num_examples, training.batch_size * _steps(update, training))
    if knows.num_samples:
        return update.num_examples
    if knows.local_training:
        return training.batch_size
    return 1


def weighted_average(updates: list[TappedUpdate]) -> dict[str, torch.Tensor]:
    """FedAvg of client updates: a wire tap knows the protocol, so it can form the aggregate itself."""
    total = sum(u.num_examples for u in updates)
    names = updates[0].observed_state.keys()
    return {
        name: cast(torch.Tensor, sum(u.observed_state[name].double() * (u.num_examples / total) for u in updates)).to(
            updates[0].observed_state[name].dtype
        )
        for name in names
    }


def build_views(
    updates: list[TappedUpdate],
    config: ThreatModel,
    architecture: Architecture,
    training: TrainingHyperparameters,
    grant_labels: LabelGrant | None,
    aggregate_noise: AggregateNoise | None = None,
) -> list[AttackerView]:
    """The attack targets of one round, as the configured threat model sees them. ``aggregate_noise``: the noise
    the protocol puts into the aggregate it releases, known to whoever runs it (None: no noise known)."""
    clients = sorted((u for u in updates if u.source != AGGREGATE), key=_client_id)
    views: list[AttackerView] = []

    def view(
        target: str,
        global_state,
        observed_state,
        num_samples,
        local_training,
        labels,
        contributors=(),
        groups=(),
        update_noise=None,
    ) -> AttackerView:
        return AttackerView(
            round=updates[0].round,
            tap=config.tap,
            target=target,
            model=architecture.model,
            global_state=global_state,
            observed_state=observed_state,
            input_shape=architecture.input_shape,
            num_classes=architecture.num_classes,
            num_samples=num_samples,
            local_training=local_training,
            labels=labels,
            input_bounds=architecture.input_bounds,
            bn_statistics=config.knows.bn_statistics,
            contributors=tuple(contributors),
            groups=tuple(groups),
            update_noise=update_noise,
        )

    def known_training(update: TappedUpdate) -> LocalTraining | None:
        if not config.knows.local_training:
            return None
        return LocalTraining(
            lr=training.lr,
            local_steps=_steps(update, training),
            batch_size=training.batch_size,
            momentum=training.momentum,
            weight_decay=training.weight_decay,
        )

    if config.targets in ("per-client", "both"):
        for update in clients:
            client = _client_id(update)
            if not config.attacks_client(client):
                continue
            count = samples_behind(update, config, training)
            labels = grant_labels(update.round, client, count) if grant_labels else None
            views.append(
                view(update.source, update.global_state, update.observed_state, count, known_training(update), labels)
            )

    if config.targets in ("aggregate", "both"):
        views.extend(_aggregate_view(updates, clients, config, training, grant_labels, view, aggregate_noise))
    return views


def _aggregate_view(updates, clients, config, training, grant_labels, view, noise) -> list[AttackerView]:
    tapped = [u for u in updates if u.source == AGGREGATE]
    if tapped:
        aggregate = tapped[0]
    elif clients:
        aggregate = TappedUpdate(
            round=clients[0].round,
            tap=clients[0].tap,
            source=AGGREGATE,
            global_state=clients[0].global_state,
            observed_state=weighted_average(clients),
            num_examples=sum(u.num_examples for u in clients),
            local_steps=None,
            contributors=tuple(_client_id(u) for u in clients),
        )
    else:
        return []
    contributors = aggregate.contributors
    by_client = {_client_id(u): u for u in clients}
    # Behind a secure aggregate the clients' updates are hidden; their sample counts are known when the
    # protocol sends them in clear (SecAgg+ does), else assume an even split of the total. Who contributed
    # is always known: the server aggregated their replies (SecAgg+: the surviving set).
    counts_in_clear = dict(zip(contributors, aggregate.contributor_examples))
    even = max(1, aggregate.num_examples // len(contributors))
    per_client = [
        by_client.get(c) or replace(aggregate, source="client:-1", num_examples=counts_in_clear.get(c, even))
        for c in contributors
    ]
    counts = [samples_behind(u, config, training) for u in per_client]
    total = sum(counts)
    # FedAvg weighs client k's update by its reported count n_k over their sum N: one local step
    # everywhere makes the aggregate delta / lr = sum_k (n_k / N) * (mean gradient of k's own batch), so
    # the dummy batch is laid out in per-client groups, each with its share (and, for BatchNorm, its own
    # batch statistics). Several steps do not compose into one unrolled client, so only the update's
    # direction is matched then (still per group).
    weights = [u.num_examples for u in per_client]
    groups = [(count, weight / sum(weights)) for count, weight in zip(counts, weights)]
    one_step = config.knows.local_training and all(_steps(u, training) == 1 for u in per_client)
    local_training = (
        LocalTraining(lr=training.lr, local_steps=1, batch_size=total, weight_decay=training.weight_decay)
        if one_step
        else None
    )  # one step: momentum has not yet acted (the first buffer is the gradient itself)
    labels = None
    if grant_labels is not None:
        labels = torch.cat([grant_labels(aggregate.round, c, n) for c, n in zip(contributors, counts)])
    # the protocol's noise is known for the aggregate it released, from its public parameters and the counts it
    # sent in clear; an aggregate a wire tap formed itself (from masked vectors under SecAgg+) carries none
    known = noise is not None and bool(tapped) and bool(aggregate.contributor_examples)
    update_noise = noise(aggregate.contributor_examples) if known else None
    return [
        view(
            AGGREGATE,
            aggregate.global_state,
            aggregate.observed_state,
            total,
            local_training,
            labels,
            contributors,
            groups,
            update_noise,
        )
    ]
