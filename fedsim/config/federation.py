"""The ``federation`` section: clients, rounds, stopping, Ray resources and injected failures."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from fedsim.core.sections import Section
from strategies.secagg import SECAGG_TRAINING_STAGE


class ClientResources(Section):
    cpus: float = Field(1.0, gt=0, description="CPU cores reserved per simulated client")
    gpus: float = Field(0.0, ge=0, description="GPU share per simulated client (fractions allowed)")


class FailureInjection(Section):
    round: int = Field(..., ge=1, description="round in which the client fails")
    client: int = Field(..., ge=0, description="partition id of the failing client")
    kind: Literal["exception", "nan", "hang"] = Field(
        "exception",
        description="raise, produce a NaN training loss, or stop answering (the client sleeps past "
        "federation.round_timeout, holding its Ray worker that long)",
    )
    stage: Literal["setup", "share_keys", "collect_masked_vectors", "unmask"] | None = Field(
        None,
        description="secagg+ only: the protocol stage it fails in (null = collect_masked_vectors, where it trains)",
    )

    @model_validator(mode="after")
    def _nan_needs_training(self) -> FailureInjection:
        if self.kind == "nan" and self.stage not in (None, SECAGG_TRAINING_STAGE):
            raise ValueError(
                f"stage = '{self.stage}': a nan loss comes from training, which happens in stage "
                f"'{SECAGG_TRAINING_STAGE}'; use kind exception or hang in other stages"
            )
        return self


class PlateauConfig(Section):
    """Stop training once test accuracy stops improving (``fedsim.core.plateau``)."""

    patience: int = Field(5, ge=1, description="evaluations in a row without an improvement after which training stops")
    min_delta: float = Field(
        0.001, ge=0, lt=1, description="an evaluation improves when it beats the best accuracy so far by more than this"
    )


class FederationConfig(Section):
    num_clients: int = Field(4, ge=1, le=10_000, description="number of simulated clients (partitions)")
    rounds: int = Field(3, ge=1, description="number of federated rounds (with `plateau`: the most rounds played)")
    plateau: PlateauConfig | None = Field(
        None,
        description="stop when test accuracy stops improving (never before the last attacked round); "
        "null: play every round",
    )
    target_accuracy: float | None = Field(
        None, gt=0, le=1, description="the run reports the first round whose test accuracy reaches this (null: none)"
    )
    fraction_fit: float = Field(1.0, gt=0, le=1, description="share of clients sampled for training each round")
    min_fit_clients: int = Field(1, ge=1, description="successful replies a round needs to update the model")
    fraction_evaluate: float = Field(
        0.0, ge=0, le=1, description="share of clients that also evaluate the global model on their own data"
    )
    round_timeout: float = Field(
        3600.0, gt=0, description="seconds to wait for replies before a client counts as failed"
    )
    client_resources: ClientResources = Field(default_factory=ClientResources, description="Ray resources per client")
    ray_address: str | None = Field(
        None,
        description="simulate on this running Ray cluster (`auto`: the one `ray start` started on this machine, or "
        "HOST:PORT of its head node); null: Ray's own RAY_ADDRESS if set, else a Ray instance of the run's own",
    )
    failures: list[FailureInjection] = Field(
        default_factory=list, description="failures to inject (dropout studies, robustness tests)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> FederationConfig:
        if self.min_fit_clients > self.num_clients:
            raise ValueError(f"min_fit_clients = {self.min_fit_clients}: must be <= num_clients ({self.num_clients})")
        for failure in self.failures:
            if failure.client >= self.num_clients:
                raise ValueError(f"failures.client = {failure.client}: must be < num_clients ({self.num_clients})")
            if failure.round > self.rounds:
                raise ValueError(f"failures.round = {failure.round}: must be <= rounds ({self.rounds})")
        return self
