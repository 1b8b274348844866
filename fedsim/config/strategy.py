"""The ``strategy`` section: the server's aggregation, central DP around it, and SecAgg+."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from fedsim.core.sections import Section
from strategies.dp import DpConfig
from strategies.registry import STRATEGIES
from strategies.secagg import SECAGG_STRATEGY, SecAggConfig


class StrategyConfig(Section):
    name: str = Field("fedavg", description="server strategy (see `fedsim list`)")
    dp: DpConfig | None = Field(
        None, description="central differential privacy (Flower's DP wrappers) around the strategy; null = off"
    )
    secagg: SecAggConfig | None = Field(
        None, description=f"SecAgg+ parameters (strategy.name = {SECAGG_STRATEGY} only; null there = the defaults)"
    )

    @field_validator("name")
    @classmethod
    def _known_strategy(cls, value: str) -> str:
        if value not in STRATEGIES:
            raise ValueError(STRATEGIES.unknown_message(value))
        return value

    @model_validator(mode="after")
    def _secagg_parameters(self) -> StrategyConfig:
        if self.name == SECAGG_STRATEGY:
            if self.secagg is None:
                self.__dict__["secagg"] = SecAggConfig()
            if self.dp is not None:
                raise ValueError(
                    f"dp = {{kind: {self.dp.kind}, ...}}: Flower's central-DP wrappers wrap Message-API strategies; "
                    f"{SECAGG_STRATEGY} runs on Flower's legacy path; set strategy.dp to null"
                )
        elif self.secagg is not None:
            raise ValueError(
                f"secagg = {self.secagg.model_dump(exclude_unset=True)}: "
                f"SecAgg+ parameters need strategy.name = {SECAGG_STRATEGY} "
                f"(name is '{self.name}')"
            )
        return self
