"""The root of an experiment config, ``ExperimentConfig``: its sections and the checks that span sections.

``data`` and ``model`` are declared with the base of their plugins' config models; ``fedsim.config.compose`` puts
the union of every registered data set and model there before anything validates.
"""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from adversary.privacy_audit.config import CLIENT, audit_level
from fedsim.config.adversary import AdversaryConfig
from fedsim.config.client import ClientConfig
from fedsim.config.federation import FederationConfig
from fedsim.config.output import OutputConfig, directory_name
from fedsim.config.strategy import StrategyConfig
from fedsim.core.sections import Section, check_device
from fedsim.data.config import DataConfig
from fedsim.models import ModelConfig
from strategies.registry import DP_MECHANISMS
from strategies.secagg import SECAGG_STRATEGY


class ExperimentConfig(Section):
    name: str = Field("fedsim", min_length=1, description="experiment name, used in the run directory")
    # numpy's legacy generators (Flower's sampling, scikit-learn) take seeds below 2**32
    seed: int = Field(0, ge=0, lt=2**32, description="seed of data partitioning, model init, sampling and training")
    device: str = Field("auto", description="`auto` (cuda when available), `cpu`, `cuda` or `cuda:N`")
    data: DataConfig = Field(default_factory=DataConfig, description="data set, size and partitioning")
    model: ModelConfig = Field(default_factory=ModelConfig, description="the federated model")
    federation: FederationConfig = Field(default_factory=FederationConfig, description="clients and rounds")
    client: ClientConfig = Field(default_factory=ClientConfig, description="local training on each client")
    strategy: StrategyConfig = Field(default_factory=StrategyConfig, description="server-side aggregation")
    adversary: AdversaryConfig = Field(default_factory=AdversaryConfig, description="attacks on the updates")
    output: OutputConfig = Field(default_factory=OutputConfig, description="where and what a run records")

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        return check_device(value)

    @field_validator("name")
    @classmethod
    def _name_is_one_folder(cls, value: str) -> str:
        return directory_name(value)  # the run directory is <output.dir>/<name>-<timestamp>

    @model_validator(mode="after")
    def _adversary_selects_what_exists(self) -> ExperimentConfig:
        adversary, federation = self.adversary, self.federation
        if not adversary.attacks:
            return self
        if adversary.knows.local_training and self.client.optimizer != "sgd":
            raise ValueError(
                f"client.optimizer = '{self.client.optimizer}': an attacker that knows the local training simulates "
                "SGD (with momentum and weight decay) only; use sgd, or set adversary.knows.local_training: false "
                "(the update's direction is matched then)"
            )
        if isinstance(adversary.clients, list) and adversary.targets != "aggregate":
            missing = [client for client in adversary.clients if client >= federation.num_clients]
            if missing:
                raise ValueError(
                    f"adversary.clients = {adversary.clients}: no client {missing[0]}; partition ids run 0 .. "
                    f"{federation.num_clients - 1} (federation.num_clients = {federation.num_clients})"
                )
        if adversary.first_attacked_round() > federation.rounds:  # not a walk over the rounds: there may be 10**9
            raise ValueError(
                f"adversary.rounds = {adversary.rounds!r}: selects no round of 1 .. {federation.rounds} "
                f"(federation.rounds = {federation.rounds})"
            )
        return self

    @model_validator(mode="after")
    def _audit_fits_the_run(self) -> ExperimentConfig:
        audit, dp = self.adversary.privacy_audit, self.strategy.dp
        if audit is None:
            return self
        client_level = audit_level(dp, self.strategy.secagg) == CLIENT  # strategy.dp or SecAgg+
        if not client_level and audit.host >= self.federation.num_clients:
            raise ValueError(
                f"adversary.privacy_audit.host = {audit.host}: must be < federation.num_clients "
                f"({self.federation.num_clients})"
            )
        if self.adversary.server == "malicious":
            raise ValueError(
                "adversary.privacy_audit with adversary.server = malicious: the clients would train the server's "
                "modified model, not the one the canaries were drawn for; audit with an honest server"
            )
        if audit.threat_model == "black-box" and client_level:
            raise ValueError(
                "adversary.privacy_audit.threat_model = 'black-box': canary examples audit example-level DP; under "
                f"strategy.dp or {SECAGG_STRATEGY} (client level) use white-box or final-model"
            )
        if audit.threat_model == "black-box" and self.adversary.attacks:
            raise ValueError(
                "adversary.privacy_audit.threat_model = 'black-box': the canary examples join the host's data, which "
                "the attacks' ground truth does not hold; audit black-box in a run without adversary.attacks"
            )
        if dp is not None and (dp.estimator != "fixed-denominator" or DP_MECHANISMS.get(dp.kind).adaptive):
            raise ValueError(
                f"adversary.privacy_audit with strategy.dp.kind = '{dp.kind}', estimator = '{dp.estimator}': canary "
                "clients need a fixed clipping norm and the fixed-denominator estimator (kind server-fixed or "
                "client-fixed)"
            )
        return self

    @model_validator(mode="after")
    def _dp_fits_federation(self) -> ExperimentConfig:
        if self.strategy.dp is not None:
            self.strategy.dp.check_federation(self.federation)
        return self

    @model_validator(mode="after")
    def _secagg_fits_federation(self) -> ExperimentConfig:
        secagg = self.strategy.secagg
        if secagg is None:
            for index, failure in enumerate(self.federation.failures):
                if failure.stage is not None:
                    raise ValueError(
                        f"federation.failures[{index}].stage = '{failure.stage}': protocol stages exist only under "
                        f"strategy.name = {SECAGG_STRATEGY}; remove it (the client fails in training)"
                    )
            return self
        secagg.check_federation(self.federation)
        if self.federation.fraction_evaluate > 0:
            raise ValueError(
                f"federation.fraction_evaluate = {self.federation.fraction_evaluate}: client-side evaluation is not "
                f"wired for {SECAGG_STRATEGY} (the global model is evaluated on the test set every round); set it to 0"
            )
        return self
