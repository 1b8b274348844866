"""`strategy.dp`: Flower's central differential privacy wrapped around a registered strategy.

Each mechanism is one of Flower's own wrappers (``flwr.serverapp.strategy.DifferentialPrivacy*``):
every client's update is clipped to an L2 norm (on the server, or on the client by Flower's
``fixedclipping_mod`` / ``adaptiveclipping_mod``) and the aggregate gets Gaussian noise of std
``noise_multiplier * clipping_norm / num_sampled_clients``. Clipping and noise are Flower's code;
this module adds what a fedsim run needs on top of it, in a mixin shared by all four wrappers:

* the rest of fedsim's strategy contract (``strategies.base.MessageStrategy``: ``bind``,
  ``sample_partitions``), forwarded to the wrapped strategy, because the round driver calls it and
  Flower's wrappers only forward Flower's Strategy interface;
* the noise is drawn from a seed derived from (experiment seed, round), so that a run repeats and
  ``--resume`` reproduces it (Flower draws from numpy's global generator, which is seeded for the
  call and restored afterwards; the attacker is never given the seed);
* every round reports its clipping norm, the noise it added and the cumulative epsilon (see
  ``strategies.privacy``) for the round's `eval` row, and a resumed run replays them;
* the estimator the noise protects, and its sensitivity under the adjacency "add or remove one client"
  (user-level DP), which the accounting uses (``sensitivity``).

The estimator (``strategy.dp.estimator``):

* ``fixed-denominator`` (default; McMahan et al. 2018, DP-FedAvg): ``x + sum_k w_k (x_k - x) / m``
  over the clipped updates ``x_k - x`` (norm <= C), with ``w_k = min(n_k, W) / W`` for a public bound
  ``W`` on a client's weight (``max_weight``; null: every weight 1) and the public denominator ``m``,
  the number of clients sampled per round. Adding or removing one client changes one term by at most
  ``C / m``: the sensitivity is ``C / m`` whatever the clients report, and Flower's noise
  ``z C / m`` gives noise multiplier ``z``. Fewer replies than ``m`` shrink the step, they never
  enlarge a client's influence.
* ``weighted-mean``: FedAvg's ``sum_k n_k x_k / sum_k n_k`` over the reported counts. Adding client
  ``j`` moves it by ``s_j (x_j - mean)`` with share ``s_j = n_j / (N + n_j)``; the counts are what
  clients report, so no public bound keeps ``s_j`` below 1, and ``||x_j - mean|| <= 2C``: the
  sensitivity is ``2C`` and the noise multiplier ``z C / m / (2C) = z / (2m)``. Honest, and small:
  use ``fixed-denominator`` for a useful guarantee.

Wrapping order: the adversary's server tap wraps the result (``StrategyTap(DP(FedAvg))``), so it sees
the replies as the server receives them (clipped by the clients under client-side clipping, raw under
server-side clipping) and the aggregate after the noise, which is what an honest-but-curious server sees.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.clientapp.mod import adaptiveclipping_mod, fixedclipping_mod
from flwr.clientapp.typing import Mod
from flwr.serverapp import Grid
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideAdaptiveClipping,
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping,
)
from pydantic import Field, field_validator, model_validator

import fedsim.core.wire as wire
from fedsim.core.flower_private import flower_noise_std
from fedsim.core.sections import Section
from fedsim.core.seeding import derive_seed
from strategies.base import SAMPLE_TRAIN, ClientSampling, MessageStrategy, Row
from strategies.fedavg import partition_of, sample_size
from strategies.privacy import ACCOUNTANT, AggregatePrivacyLedger
from strategies.registry import DP_MECHANISMS

_ADAPTIVE_ONLY = ("target_clipped_quantile", "clip_norm_lr", "clipped_count_stddev")


class DpConfig(Section):
    """Central DP by Flower's strategy wrappers: clip every client's update, add Gaussian noise to the aggregate."""

    kind: str = Field(
        "server-fixed",
        description="clipping: server-fixed, client-fixed, server-adaptive, client-adaptive (see `fedsim list`)",
    )
    noise_multiplier: float = Field(
        1.0, ge=0, description="noise std / clipping norm on the sum of updates (0 = clip only, epsilon infinite)"
    )
    clipping_norm: float = Field(
        1.0, gt=0, description="L2 bound on each client's update (adaptive: the initial bound)"
    )
    num_sampled_clients: int | None = Field(
        None, ge=1, description="clients the noise is calibrated for (null = those FedAvg samples per round)"
    )
    target_clipped_quantile: float | None = Field(
        None, ge=0, le=1, description="(adaptive) share of updates the bound should clip (null = 0.5)"
    )
    clip_norm_lr: float | None = Field(None, gt=0, description="(adaptive) learning rate of the bound (null = 0.2)")
    clipped_count_stddev: float | None = Field(
        None, ge=0, description="(adaptive) noise std of the clipped count (null = num_sampled_clients / 20)"
    )
    estimator: Literal["fixed-denominator", "weighted-mean"] = Field(
        "fixed-denominator",
        description="the aggregate the noise protects: fixed-denominator (sensitivity C/m, public weights "
        "min(num-examples, max_weight)/max_weight) or weighted-mean (reported counts, sensitivity 2C)",
    )
    max_weight: float | None = Field(
        None,
        gt=0,
        description="(fixed-denominator) public bound on a client's num-examples weight (null = weight 1 each)",
    )
    delta: float = Field(
        1e-5, gt=0, lt=1, description="delta of the reported epsilon (adjacency: add/remove one client)"
    )
    amplification: bool = Field(
        False,
        description="credit amplification by client sampling (as Poisson, rate sampled/num_clients); sound only "
        "where the sampling is secret from the adversary (the server and mitm taps see who was sampled)",
    )

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value not in DP_MECHANISMS:
            raise ValueError(DP_MECHANISMS.unknown_message(value))
        return value

    @model_validator(mode="after")
    def _adaptive_options(self) -> DpConfig:
        if self.max_weight is not None and self.estimator != "fixed-denominator":
            raise ValueError(
                f"max_weight = {self.max_weight}: only estimator 'fixed-denominator' uses it; "
                f"estimator is '{self.estimator}'"
            )
        if not DP_MECHANISMS.get(self.kind).adaptive:
            for key in _ADAPTIVE_ONLY:
                if getattr(self, key) is not None:
                    raise ValueError(
                        f"{key} = {getattr(self, key)!r}: only adaptive kinds (server-adaptive, client-adaptive) "
                        f"use it; kind is '{self.kind}'"
                    )
        return self

    def sampled_clients(self, federation: ClientSampling) -> int:
        """Clients the noise is calibrated for: as configured, or as many as FedAvg samples per round."""
        if self.num_sampled_clients is not None:
            return self.num_sampled_clients
        return sample_size(federation.num_clients, federation.fraction_fit, federation.min_fit_clients)

    def check_federation(self, federation: ClientSampling) -> None:
        """What only the federation can tell (a one-line ValueError naming the key)."""
        if self.num_sampled_clients is not None and self.num_sampled_clients > federation.num_clients:
            raise ValueError(
                f"strategy.dp.num_sampled_clients = {self.num_sampled_clients}: must be <= "
                f"federation.num_clients ({federation.num_clients})"
            )
        if DP_MECHANISMS.get(self.kind).adaptive and self.noise_multiplier > 0:
            sampled = self.sampled_clients(federation)
            stddev = self.clipped_count_stddev if self.clipped_count_stddev is not None else sampled / 20
            origin = "" if self.clipped_count_stddev is not None else f" = num_sampled_clients / 20 = {sampled}/20"
            if self.noise_multiplier >= 2 * stddev:  # Flower's own precondition, checked before anything runs
                raise ValueError(
                    f"strategy.dp.noise_multiplier = {self.noise_multiplier}: adaptive clipping needs it "
                    f"< 2 * clipped_count_stddev ({stddev:g}{origin}); raise strategy.dp.clipped_count_stddev"
                )


@contextmanager
def seeded_numpy(seed: int) -> Iterator[None]:
    """Seed numpy's global generator (where Flower draws DP noise) for one call, then restore it."""
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)


ADJACENCY = "add/remove one client"


def sensitivity(estimator: str, clipping_norm: float, num_sampled_clients: int) -> float:
    """The most adding or removing one client moves the estimator's output (derivations: module docstring)."""
    if estimator == "fixed-denominator":
        return clipping_norm / num_sampled_clients
    return 2 * clipping_norm


def effective_noise_multiplier(noise_std: float, sensitivity: float, count_noise_std: float | None = None) -> float:
    """Noise std over the estimator's sensitivity: the noise multiplier the accountant needs.

    Adaptive clipping also releases the noisy count of clipped updates, a second Gaussian on the same
    clients with sensitivity 1 (Flower counts unshifted bits); both compose into one Gaussian,
    (z1^-2 + z2^-2)^-1/2.
    """
    if noise_std <= 0:
        return 0.0
    multiplier = noise_std / sensitivity
    if count_noise_std is None:
        return multiplier
    if count_noise_std <= 0:
        return 0.0
    return (multiplier**-2 + count_noise_std**-2) ** -0.5


class WrappedStrategy(MessageStrategy, Protocol):
    """What a DP wrapper reads of the strategy it wraps beyond the contract: Flower's FedAvg has both."""

    @property
    def arrayrecord_key(self) -> str: ...

    def summary(self) -> None: ...


class FixedDenominatorMean:
    """``estimator: fixed-denominator`` in front of FedAvg: ``x + sum_k w_k (x_k - x) / m``.

    Flower's wrappers clip the replies, call this ``aggregate_train``, then noise what it returns; every
    other call they make is forwarded, explicitly, to the wrapped FedAvg (sampling, metrics, the
    min_fit_clients rule).
    """

    def __init__(self, strategy: WrappedStrategy, denominator: int, max_weight: float | None) -> None:
        self.strategy = strategy
        self.denominator = denominator
        self.max_weight = max_weight
        self._current: dict[int, ArrayRecord] = {}
        # a privacy audit's canary clients: the sum of their updates (each at most the clipping norm), by key,
        # added to the clipped clients' sum every round as further clients' updates would be
        self.inserted: dict[str, np.ndarray] | None = None

    @property
    def protocol(self) -> str:
        return self.strategy.protocol

    @property
    def arrayrecord_key(self) -> str:
        return self.strategy.arrayrecord_key

    def bind(self, node_of_partition: Mapping[int, int]) -> None:
        self.strategy.bind(node_of_partition)

    def sample_partitions(self, server_round: int, purpose: str = SAMPLE_TRAIN) -> list[int]:
        return self.strategy.sample_partitions(server_round, purpose)

    def round_metrics(self, server_round: int) -> Row:
        return self.strategy.round_metrics(server_round)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return self.strategy.aggregate_evaluate(server_round, replies)

    def summary(self) -> None:
        self.strategy.summary()

    def weight(self, reply: Message) -> float:
        if self.max_weight is None:
            return 1.0
        examples = float(cast(float, wire.reply_metrics(reply)[wire.NUM_EXAMPLES]))
        return min(examples, self.max_weight) / self.max_weight

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self._current[server_round] = arrays
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        ordered = sorted((r for r in replies if not r.has_error()), key=partition_of)
        mean, metrics = self.strategy.aggregate_train(server_round, ordered)  # FedAvg's checks and metrics
        current = self._current.pop(server_round)
        if mean is None:
            return None, metrics
        base = current.to_numpy_ndarrays()
        total = [np.zeros(array.shape, dtype=np.float64) for array in base]
        for reply in ordered:
            weight = self.weight(reply)
            sent = reply.content.array_records[self.strategy.arrayrecord_key].to_numpy_ndarrays()
            for summed, value, start in zip(total, sent, base, strict=True):
                summed += weight * (value.astype(np.float64) - start)
        for summed, key in zip(total, current.keys(), strict=True):
            if self.inserted is not None and key in self.inserted:
                summed += self.inserted[key]
        arrays = [(start + summed / self.denominator).astype(start.dtype) for start, summed in zip(base, total)]
        return ArrayRecord(dict(zip(current.keys(), (Array(a) for a in arrays), strict=True))), metrics


class FedsimDp:
    """Mixin in front of a Flower DP wrapper: forwarding, seeded noise, per-round privacy record."""

    adaptive = False  # adaptive wrappers also noise (and release) the count of clipped updates

    # Provided by the Flower wrapper this mixin is combined with (which types ``strategy`` as its Strategy:
    # ours is a fedsim strategy, or FixedDenominatorMean in front of one; clipped_count_stddev: adaptive only).
    strategy: Any
    clipped_count_stddev: float
    noise_multiplier: float
    clipping_norm: float
    num_sampled_clients: int

    def __init__(
        self,
        strategy: WrappedStrategy,
        *,
        mechanism: str,
        seed: int,
        population: int,
        settings: DpConfig,
        **flower: Any,
    ) -> None:
        if settings.estimator == "fixed-denominator":
            strategy = FixedDenominatorMean(strategy, flower["num_sampled_clients"], settings.max_weight)
        super().__init__(strategy, **flower)  # type: ignore[call-arg]
        self.mechanism = mechanism
        self.estimator = settings.estimator
        self.seed = seed
        self.population = population
        self.amplification = settings.amplification
        self.ledger = AggregatePrivacyLedger(settings.delta)
        self._sampled: dict[int, int] = {}
        self._rows: dict[int, Row] = {}

    @property
    def protocol(self) -> str:
        return self.strategy.protocol

    def bind(self, node_of_partition: Mapping[int, int]) -> None:
        self.strategy.bind(node_of_partition)

    def sample_partitions(self, server_round: int, purpose: str = SAMPLE_TRAIN) -> list[int]:
        return self.strategy.sample_partitions(server_round, purpose)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        messages = list(super().configure_train(server_round, arrays, config, grid))  # type: ignore[misc]
        self._sampled[server_round] = len(messages)
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        clipped_at = self.clipping_norm  # adaptive wrappers move it during aggregation
        with seeded_numpy(derive_seed(self.seed, "dp-noise", server_round)):
            aggregated, metrics = super().aggregate_train(server_round, replies)  # type: ignore[misc]
        bound = sensitivity(self.estimator, clipped_at, self.num_sampled_clients)
        row: Row = {"dp_mechanism": self.mechanism, "dp_clipping_norm": clipped_at, "dp_sensitivity": bound}
        if aggregated is None:  # nothing released (a failed client, too few replies): nothing spent
            row |= {"dp_noise_std": 0.0, "dp_noise_multiplier": None, "dp_sample_rate": None}
        else:
            # the noise Flower added: adaptive wrappers draw it at the bound they have just moved
            noise_std = flower_noise_std(self.noise_multiplier, self.clipping_norm, self.num_sampled_clients)
            count_noise = self.clipped_count_stddev if self.adaptive else None
            multiplier = effective_noise_multiplier(noise_std, bound, count_noise)
            replied = sum(1 for reply in replies if not reply.has_error())
            rate = self._sampled.get(server_round, replied) / self.population if self.amplification else 1.0
            self.ledger.release(multiplier, rate)
            row |= {"dp_noise_std": noise_std, "dp_noise_multiplier": multiplier, "dp_sample_rate": rate}
        if self.adaptive:
            row["dp_next_clipping_norm"] = self.clipping_norm
        self._rows[server_round] = row
        return aggregated, metrics

    def round_metrics(self, server_round: int) -> Row:
        """The round's DP fields for its `eval` row, with the cumulative epsilon so far."""
        row = self._rows.pop(server_round, {"dp_mechanism": self.mechanism, "dp_clipping_norm": self.clipping_norm})
        return {
            **row,
            "dp_epsilon": self.ledger.epsilon(),
            "dp_delta": self.ledger.delta,
            "dp_accountant": ACCOUNTANT,
            "dp_adjacency": ADJACENCY,
            "dp_estimator": self.estimator,
            "dp_amplification": self.amplification,
        }

    def restore(self, history: Iterable[Mapping[str, Any]]) -> None:
        """Continue a resumed run: replay the releases (and the adaptive norm) recorded in its `eval` rows."""
        for row in sorted(
            (r for r in history if r.get("event") == "eval" and "dp_mechanism" in r), key=lambda r: r["round"]
        ):
            if row.get("dp_noise_multiplier") is not None:
                self.ledger.release(float(row["dp_noise_multiplier"]), float(row["dp_sample_rate"]))
            if self.adaptive and row.get("dp_next_clipping_norm") is not None:
                self.clipping_norm = float(row["dp_next_clipping_norm"])


class ServerSideFixed(FedsimDp, DifferentialPrivacyServerSideFixedClipping):
    """Flower's server-side fixed clipping: the server clips each reply, then noises the aggregate."""


class ClientSideFixed(FedsimDp, DifferentialPrivacyClientSideFixedClipping):
    """Flower's client-side fixed clipping: clients clip (fixedclipping_mod), the server noises."""


class ServerSideAdaptive(FedsimDp, DifferentialPrivacyServerSideAdaptiveClipping):
    """Flower's server-side adaptive clipping (Andrew et al. 2019)."""

    adaptive = True


class ClientSideAdaptive(FedsimDp, DifferentialPrivacyClientSideAdaptiveClipping):
    """Flower's client-side adaptive clipping (Andrew et al. 2019, adaptiveclipping_mod on the clients)."""

    adaptive = True


def _fixed_arguments(settings: DpConfig, num_sampled: int) -> dict[str, Any]:
    return {
        "noise_multiplier": settings.noise_multiplier,
        "clipping_norm": settings.clipping_norm,
        "num_sampled_clients": num_sampled,
    }


def _adaptive_arguments(settings: DpConfig, num_sampled: int) -> dict[str, Any]:
    optional = {
        "target_clipped_quantile": settings.target_clipped_quantile,
        "clip_norm_lr": settings.clip_norm_lr,
        "clipped_count_stddev": settings.clipped_count_stddev,
    }
    return {
        "noise_multiplier": settings.noise_multiplier,
        "num_sampled_clients": num_sampled,
        "initial_clipping_norm": settings.clipping_norm,
        **{key: value for key, value in optional.items() if value is not None},  # null: Flower's default
    }


@dataclass(frozen=True)
class DpMechanism:
    """A `strategy.dp.kind`: the server wrapper, its Flower arguments, and the client mod it needs."""

    wrapper: type[FedsimDp]
    arguments: Callable[[DpConfig, int], dict[str, Any]]
    client_mod: Mod | None

    @property
    def adaptive(self) -> bool:
        return self.wrapper.adaptive


for _name, _mechanism in {
    "server-fixed": DpMechanism(ServerSideFixed, _fixed_arguments, None),
    "client-fixed": DpMechanism(ClientSideFixed, _fixed_arguments, fixedclipping_mod),
    "server-adaptive": DpMechanism(ServerSideAdaptive, _adaptive_arguments, None),
    "client-adaptive": DpMechanism(ClientSideAdaptive, _adaptive_arguments, adaptiveclipping_mod),
}.items():
    DP_MECHANISMS.register(_name, help=(_mechanism.wrapper.__doc__ or "").rstrip("."), config=DpConfig)(_mechanism)


def wrap_dp(
    strategy: WrappedStrategy,
    settings: DpConfig,
    federation: ClientSampling,
    seed: int,
    history: Iterable[Mapping[str, Any]] = (),
) -> FedsimDp:
    """Wrap ``strategy`` in the mechanism of ``settings`` (``strategy.dp``); ``history`` (a resumed run's rows)
    restores its state."""
    mechanism = DP_MECHANISMS.get(settings.kind)
    num_sampled = settings.sampled_clients(federation)
    wrapped = mechanism.wrapper(
        strategy,
        mechanism=settings.kind,
        seed=seed,
        population=federation.num_clients,
        settings=settings,
        **mechanism.arguments(settings, num_sampled),
    )
    wrapped.restore(history)
    return wrapped


def client_mods(settings: DpConfig | None) -> list[Mod]:
    """Mods the ClientApp's train handler needs under ``strategy.dp``: Flower's clipping mod under client-side
    clipping, else none."""
    if settings is None:
        return []
    mod = DP_MECHANISMS.get(settings.kind).client_mod
    return [mod] if mod is not None else []
