"""What an attacker may use, and what an attack returns.

The split follows breaching: an ``AttackerView`` holds only what a threat model exposes (the tapped
update, the global model it started from, and what ``adversary.knows`` grants). Ground truth never
appears here; scoring pairs a ``Reconstruction`` with the truth outside the attack.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass(frozen=True)
class LocalTraining:
    """The victim's local training, when the threat model grants it (adversary.knows.local_training)."""

    lr: float
    local_steps: int  # optimizer steps the client took this round
    batch_size: int
    momentum: float = 0.0  # SGD's (PyTorch's convention: buffer = momentum * buffer + gradient, no dampening)
    weight_decay: float = 0.0  # L2 term added to every gradient: weight_decay * parameter


@dataclass(frozen=True)
class AttackerView:
    """One attack target: a tapped update and the attacker's knowledge, nothing else."""

    round: int
    tap: str  # "mitm" | "server"
    target: str  # "client:<id>" | "aggregate"
    model: nn.Module  # the architecture; its own weights are ignored (global_state is used)
    global_state: dict[str, torch.Tensor]  # parameters and buffers the clients started the round from
    observed_state: dict[str, torch.Tensor]  # what was tapped: a client's weights as sent, or the aggregate
    input_shape: tuple[int, int, int]  # (C, H, W) of one input, in the model's (normalised) input space
    num_classes: int
    num_samples: int  # images to reconstruct: known, or the attacker's assumption
    local_training: LocalTraining | None = None  # None: assume one step with unknown learning rate
    labels: torch.Tensor | None = None  # granted labels (adversary.knows.labels = known), else inferred
    input_bounds: tuple[torch.Tensor, torch.Tensor] | None = None  # per-channel (low, high) of valid inputs
    bn_statistics: bool = False  # may BatchNorm statistics of the victim's batch be used as a prior
    # An aggregate's make-up, as the server sees it: the clients whose updates are in it, and per client
    # (samples behind its update, its share of the aggregate). The dummy samples are laid out in these
    # groups, in order; empty for one client's update (one group of all samples, share 1).
    contributors: tuple[int, ...] = ()
    groups: tuple[tuple[int, float], ...] = ()

    def parameter_delta(self) -> dict[str, torch.Tensor]:
        """w_t - w_{t+1} for every trainable parameter (buffers excluded)."""
        names = [name for name, _ in self.model.named_parameters()]
        return {name: self.global_state[name] - self.observed_state[name] for name in names}


@dataclass(frozen=True)
class TrajectoryPoint:
    iteration: int
    objective: float
    images: torch.Tensor  # the best restart's images at this iteration (model input space), on CPU


@dataclass(frozen=True)
class Reconstruction:
    """An attack's output: images in the model's input space and labels, with the attack's own bookkeeping."""

    images: torch.Tensor  # (num_samples, C, H, W), CPU; (num_samples, 0) for text, whose output is ``tokens``
    labels: torch.Tensor  # (num_samples,), int64, CPU
    objective: float  # the attack's own final objective of the chosen restart
    restart_objectives: tuple[float, ...]
    iterations: int  # optimizer steps taken (fewer than asked when cut)
    seconds: float
    trajectory: tuple[TrajectoryPoint, ...] = field(default_factory=tuple)
    cut: bool = False  # stopped by the attack's time_limit: the best reconstruction so far
    restarts: int = 0  # restarts run for this result (0: as the attack's options said)
    # the saturation step (adversary.budget): "saturated" (more iterations and restarts no longer improved the
    # attack's own objective), "capped" (the budget ran out first), "not leading" (another attack led), "off"
    saturation: str = "off"
    # 1 - cosine between the update simulated from this reconstruction and the observed one: an attacker-side
    # yardstick that compares attacks whose own objectives are in different units (None: not computed)
    gradient_match: float | None = None
    # the fraction of the observed update's entries the attack matched where it matches only some of them
    # (``match_entries``: e.g. Gradient Dropout's kept entries above its noise); None: it matched them all
    matched_fraction: float | None = None
    # the cleaning the attacker applied to its output, chosen by gradient match (``adversary.postprocessing``); None:
    # the attack's output as it came
    postprocess: str | None = None
    # the tuning behind the options this ran with (``adversary.inversion.tuning.Tuning.to_row``); None: untuned
    tuning: dict | None = None
    # a text attack's sequences: (num_samples, L) token ids, right-padded with the model's padding id; None for images
    tokens: torch.Tensor | None = None
    # a raced portfolio (``adversary.inversion.race``): the rung this attack was eliminated at on this target, its
    # result being that rung's (None: not raced, or still in the race when it ended)
    eliminated_at: int | None = None
