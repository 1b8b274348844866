"""The ``client`` section: local training and the defenses every client applies.

``client.defenses[]`` is declared with the base of the defenses' config models; ``fedsim.config.compose`` puts the
union of every registered defense there before anything validates.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from clients.defenses.base import DefenseConfig
from clients.defenses.registry import DEFENSES
from fedsim.core.sections import Section

# Defenses: one model per mechanism, discriminated by `name`, each declared and registered beside its
# implementation in clients/defenses. Training-level defenses change how the client trains; update-level
# ones transform what it sends, in the order listed.


def _training_defenses() -> list[str]:
    return [name for name in DEFENSES if DEFENSES.get(name).kind == "training"]


class ClientConfig(Section):
    optimizer: Literal["sgd", "adam"] = Field("sgd", description="local optimizer")
    lr: float = Field(0.1, gt=0, description="local learning rate")
    momentum: float = Field(0.0, ge=0, lt=1, description="SGD momentum")
    weight_decay: float = Field(0.0, ge=0, description="L2 weight decay")
    batch_size: int = Field(32, ge=1, description="local mini-batch size")
    local_steps: int | None = Field(
        None, ge=1, description="local optimizer steps per round (exclusive with local_epochs)"
    )
    local_epochs: int | None = Field(
        None, ge=1, description="local epochs per round (default 1 when local_steps is unset)"
    )
    defenses: list[DefenseConfig] = Field(
        default_factory=list, description="defenses applied by every client, in order (see `fedsim list`)"
    )
    verify_model: bool = Field(
        False,
        description="refuse a model from the server whose architecture differs from the agreed one (`model`): the "
        "client fails that round instead of training it (stops a malicious server's modification)",
    )

    @field_validator("defenses", mode="before")
    @classmethod
    def _defense_shorthand(cls, value: Any) -> Any:
        # `defenses: [soteria]` is shorthand for `defenses: [{name: soteria}]`
        return (
            [{"name": item} if isinstance(item, str) else item for item in value] if isinstance(value, list) else value
        )

    @field_validator("defenses")
    @classmethod
    def _training_defenses_once(cls, value: list[Any]) -> list[Any]:
        training = _training_defenses()
        for name in training:
            if sum(defense.name == name for defense in value) > 1:
                raise ValueError(f"'{name}' is listed twice; a client trains with it at most once")
        listed = [name for name in training if name in {defense.name for defense in value}]
        if len(listed) > 1:
            raise ValueError(
                f"{' and '.join(repr(name) for name in listed)} both change the local training; list only one of them"
            )
        return value

    @model_validator(mode="after")
    def _steps_or_epochs(self) -> ClientConfig:
        if self.local_steps is not None and self.local_epochs is not None:
            raise ValueError(
                f"local_steps = {self.local_steps} and local_epochs = {self.local_epochs}: set only one of them "
                "(the other to null)"
            )
        if self.local_steps is None and self.local_epochs is None:
            self.__dict__["local_epochs"] = 1
        return self

    @property
    def dp_compatible_model(self) -> bool:
        """Whether the model is built with Opacus' layer replacements (dpsgd with fix_model: true), everywhere."""
        return any(defense.builds_dp_compatible_model for defense in self.defenses)
