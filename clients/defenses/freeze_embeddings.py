"""``freeze-embeddings``: a language model's word embeddings are not trained, so their update is zero.

FILM (Gupta et al., NeurIPS 2022) reads the words of a batch off the rows of the word-embedding update that
changed, and shows that freezing the embeddings stops that at little cost in utility. The defense trains the
round with the text model's input embedding matrix frozen (``requires_grad`` off, so no optimizer step moves
it); GPT-2 ties its output layer to that matrix, which then stays frozen too. Attacks that read other layers
(DAGER reads the span of the attention projections' updates and uses the embeddings only as the public
vocabulary) are not what it was designed against: measure them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from torch import nn

from clients.defenses.base import DefenseConfig, DefenseEntry, TrainingPlan, TrainingSession
from clients.defenses.registry import DEFENSES
from fedsim.models import ModelError


class FreezeEmbeddingsDefense(DefenseConfig):
    name: Literal["freeze-embeddings"] = Field(
        "freeze-embeddings", description="train language models with their word embeddings frozen (FILM)"
    )


def word_embeddings(model: nn.Module) -> nn.Module:
    """The input embedding of a text model (``fedsim.models.architectures.text.TextModel``); ModelError for any
    other model."""
    base = getattr(model, "base", None)
    network = base() if callable(base) else None
    if network is None or not hasattr(network, "get_input_embeddings"):
        raise ModelError(f"client.defenses freeze-embeddings: model {type(model).__name__} is not a language model")
    return network.get_input_embeddings()


class FrozenEmbeddingsSession(TrainingSession):
    """Plain training with the word embeddings' ``requires_grad`` off; ``close`` restores it."""

    def __init__(self, plan: TrainingPlan) -> None:
        super().__init__(plan.model, plan.optimizer)
        self.frozen = [p for p in word_embeddings(plan.model).parameters() if p.requires_grad]
        for parameter in self.frozen:
            parameter.requires_grad_(False)

    def finish(self) -> dict[str, float]:
        return {"frozen_parameters": float(sum(parameter.numel() for parameter in self.frozen))}

    def close(self) -> None:
        for parameter in self.frozen:
            parameter.requires_grad_(True)


def _open(config: FreezeEmbeddingsDefense, plan: TrainingPlan) -> TrainingSession:
    return FrozenEmbeddingsSession(plan)


def _check(model: nn.Module, config: FreezeEmbeddingsDefense) -> None:
    word_embeddings(model)


DEFENSES.register(
    "freeze-embeddings",
    help="language models only: train with the word embeddings frozen (FILM), so their rows never change",
    config=FreezeEmbeddingsDefense,
)(DefenseEntry(kind="training", train=_open, check_model=_check))
