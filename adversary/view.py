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
    """One attack target: a tapped update and the attacker's knowledge, nothing else.

    Attributes
    ----------
    round
        The round the update was tapped in.
    tap
        Where it was tapped: ``"mitm"`` (on the wire) or ``"server"``.
    target
        ``"client:<id>"`` or ``"aggregate"``.
    model
        The architecture; its own weights are ignored (``global_state`` is used).
    global_state
        The parameters and buffers the clients started the round from.
    observed_state
        What was tapped: a client's weights as sent, or the aggregate.
    input_shape
        (C, H, W) of one input, in the model's (normalised) input space.
    num_classes
        The classifier's number of classes.
    num_samples
        Images to reconstruct: known, or the attacker's assumption.
    local_training
        The victim's local training when granted; None: assume one step with unknown learning rate.
    labels
        Granted labels (``adversary.knows.labels = known``); None: the attack infers them.
    input_bounds
        Per-channel (low, high) of valid inputs; None: unbounded.
    bn_statistics
        Whether BatchNorm statistics of the victim's batch may be used as a prior.
    contributors
        An aggregate's make-up, as the server sees it: the clients whose updates are in it (empty for one
        client's update).
    groups
        Per contributor (samples behind its update, its share of the aggregate); the dummy samples are laid out
        in these groups, in order. Empty for one client's update (one group of all samples, share 1).
    update_noise
        Standard deviation of the noise the aggregation protocol is known to have put into each entry of the
        update, from its public parameters (SecAgg+'s stochastic quantisation); None: none known.
    """

    round: int
    tap: str
    target: str
    model: nn.Module
    global_state: dict[str, torch.Tensor]
    observed_state: dict[str, torch.Tensor]
    input_shape: tuple[int, int, int]
    num_classes: int
    num_samples: int
    local_training: LocalTraining | None = None
    labels: torch.Tensor | None = None
    input_bounds: tuple[torch.Tensor, torch.Tensor] | None = None
    bn_statistics: bool = False
    contributors: tuple[int, ...] = ()
    groups: tuple[tuple[int, float], ...] = ()
    update_noise: float | None = None

    def parameter_delta(self) -> dict[str, torch.Tensor]:
        """w_t - w_{t+1} for every trainable parameter (buffers excluded).

        Returns
        -------
        dict[str, torch.Tensor]
            Parameter name -> ``global_state`` minus ``observed_state``.
        """
        names = [name for name, _ in self.model.named_parameters()]
        return {name: self.global_state[name] - self.observed_state[name] for name in names}


@dataclass(frozen=True)
class TrajectoryPoint:
    iteration: int
    objective: float
    images: torch.Tensor  # the best restart's images at this iteration (model input space), on CPU


@dataclass(frozen=True)
class Reconstruction:
    """An attack's output: images in the model's input space and labels, with the attack's own bookkeeping.

    Attributes
    ----------
    images
        (num_samples, C, H, W), on the CPU; (num_samples, 0) for text, whose output is ``tokens``.
    labels
        (num_samples,) int64 class ids, on the CPU.
    objective
        The attack's own final objective of the chosen restart.
    restart_objectives
        Each restart's final objective.
    iterations
        Optimizer steps taken (fewer than asked when cut).
    seconds
        Wall-clock time of the attack.
    trajectory
        The best restart's images at recorded iterations (model input space, CPU).
    cut
        Stopped by the attack's ``time_limit``: the best reconstruction so far.
    restarts
        Restarts run for this result (0: as the attack's options said).
    saturation
        The saturation step (``adversary.budget``): ``"saturated"`` (more iterations and restarts no longer
        improved the attack's own objective), ``"capped"`` (the budget ran out first), ``"not leading"``
        (another attack led), ``"off"``.
    gradient_match
        1 - cosine between the update simulated from this reconstruction and the observed one: an
        attacker-side yardstick that compares attacks whose own objectives are in different units (None: not
        computed).
    matched_fraction
        The fraction of the observed update's entries the attack matched where it matches only some of them
        (``match_entries``: e.g. Gradient Dropout's kept entries above its noise); None: it matched them all.
    postprocess
        The cleaning the attacker applied to its output, chosen by gradient match
        (``adversary.postprocessing``); None: the attack's output as it came.
    tuning
        The tuning behind the options this ran with (``adversary.inversion.tuning.Tuning.to_row``); None:
        untuned.
    tokens
        A text attack's sequences: (num_samples, L) token ids, right-padded with the model's padding id; None
        for images.
    eliminated_at
        In a raced portfolio (``adversary.inversion.race``): the rung this attack was eliminated at on this
        target, its result being that rung's (None: not raced, or still in the race when it ended).
    """

    images: torch.Tensor
    labels: torch.Tensor
    objective: float
    restart_objectives: tuple[float, ...]
    iterations: int
    seconds: float
    trajectory: tuple[TrajectoryPoint, ...] = field(default_factory=tuple)
    cut: bool = False
    restarts: int = 0
    saturation: str = "off"
    gradient_match: float | None = None
    matched_fraction: float | None = None
    postprocess: str | None = None
    tuning: dict | None = None
    tokens: torch.Tensor | None = None
    eliminated_at: int | None = None
