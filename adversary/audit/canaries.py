"""The canaries of a one-run privacy audit: what is inserted into training, each canary with probability 1/2.

* ``DiracCanaries`` (example level, white-box; Steinke et al. 2023, Nasr et al. 2023): canary j is one
  coordinate ``c_j`` of the trainable parameters (in ``named_parameters`` order, flattened). An included canary
  behaves as one more example of the host client whose gradient is ``norm * e_{c_j}``: it joins each local
  step's batch independently with the step's sampling rate, as a data example does under Poisson sampling, and
  its gradient is summed with the (clipped) per-example gradients *before* DP-SGD adds noise. With ``norm`` the
  clipping bound C it is the worst-case example DP-SGD must hide.
* ``CanaryExamples`` (example level, black-box): mislabelled images (test-split images, which no client holds,
  with a wrong label drawn at random); the included ones are added to the host client's training data.
* ``CanaryClients`` (client level; Andrew et al., ICLR 2024): canary client j sends ``norm * u_j``, a fixed
  random unit direction, every round; with ``norm`` the clipping bound it passes clipping unchanged.

A plan is drawn from the run's seed alone, so every process that needs it (the host client, the auditor)
draws the same one; which canaries were included is ground truth, used only to check the auditor's guesses.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from fedsim.core.seeding import derive_seed


def inclusion(canaries: int, seed: int) -> np.ndarray:
    """Which of the ``canaries`` are inserted: each independently with probability 1/2."""
    return np.random.default_rng(derive_seed(seed, "audit-inclusion")).random(canaries) < 0.5


def parameter_count(parameters: Sequence[torch.Tensor]) -> int:
    return sum(parameter.numel() for parameter in parameters)


@dataclass(frozen=True)
class DiracCanaries:
    """Canary j is the coordinate ``coordinates[j]``; ``included[j]`` whether it is inserted."""

    coordinates: np.ndarray  # distinct flat indices into the trainable parameters
    included: np.ndarray
    norm: float

    @classmethod
    def draw(cls, canaries: int, dimension: int, norm: float, seed: int) -> DiracCanaries:
        if canaries > dimension:
            raise ValueError(
                f"audit.canaries = {canaries}: a Dirac canary takes one parameter of the model, which has {dimension}"
            )
        picker = np.random.default_rng(derive_seed(seed, "audit-coordinates"))
        return cls(picker.choice(dimension, size=canaries, replace=False), inclusion(canaries, seed), norm)

    def inserter(self, sample_rate: float, seed: int) -> StepCanaries:
        """The insertion for one client's round: included canaries join each step with ``sample_rate``."""
        return StepCanaries(self.coordinates[self.included], self.norm, sample_rate, np.random.default_rng(seed))

    def read(self, flat_update: torch.Tensor) -> np.ndarray:
        """Each canary's coordinate of a flattened update."""
        return flat_update.detach()[torch.from_numpy(self.coordinates)].double().cpu().numpy()


class StepCanaries:
    """One round's Dirac-canary insertion (``clients.defenses.base.GradientInsertion``)."""

    def __init__(self, coordinates: np.ndarray, norm: float, sample_rate: float, rng: np.random.Generator) -> None:
        self.coordinates = torch.from_numpy(np.asarray(coordinates, dtype=np.int64))
        self.norm = norm
        self.sample_rate = sample_rate
        self.rng = rng
        self.inserted = 0  # canary-steps so far, for the record

    def step_gradients(self, parameters: Sequence[torch.Tensor]) -> list[torch.Tensor] | None:
        """The summed gradients of the canaries that joined this step, shaped as ``parameters``; None if none did."""
        joined = self.coordinates[torch.from_numpy(self.rng.random(len(self.coordinates)) < self.sample_rate)]
        if len(joined) == 0:
            return None
        self.inserted += len(joined)
        flat = torch.zeros(parameter_count(parameters), dtype=parameters[0].dtype, device=parameters[0].device)
        flat[joined.to(flat.device)] = self.norm
        pieces = torch.split(flat, [parameter.numel() for parameter in parameters])
        return [piece.view_as(parameter) for piece, parameter in zip(pieces, parameters, strict=True)]


@dataclass(frozen=True)
class ExampleCanaries:
    """What the host client needs to insert its canaries (pickled into every client process): Dirac gradient
    canaries, or with ``examples`` (black-box) mislabelled test images added to its data."""

    canaries: int
    norm: float
    host: int
    seed: int  # the run's audit seed
    examples: bool = False

    def plan(self, model: torch.nn.Module) -> DiracCanaries:
        """The run's Dirac canaries over ``model``'s trainable parameters."""
        dimension = sum(p.numel() for p in model.parameters() if p.requires_grad)
        return DiracCanaries.draw(self.canaries, dimension, self.norm, self.seed)

    def for_round(
        self, model: torch.nn.Module, partition: int, server_round: int, sample_rate: float
    ) -> StepCanaries | None:
        """The round's gradient insertion on the host (None on every other client, and for canary examples)."""
        if partition != self.host or self.examples:
            return None
        return self.plan(model).inserter(sample_rate, derive_seed(self.seed, "audit-steps", server_round))

    def example_set(self, images: torch.Tensor, labels: torch.Tensor, num_classes: int) -> CanaryExamples:
        """The run's canary examples from the test ``images`` (in the host's input space) and their labels."""
        return CanaryExamples.draw(images, labels, self.canaries, num_classes, self.seed)


@dataclass(frozen=True)
class CanaryExamples:
    """Mislabelled images: ``x[j]`` with label ``y[j]`` (never its true one); ``included[j]`` whether inserted."""

    x: torch.Tensor
    y: torch.Tensor
    included: np.ndarray
    source: np.ndarray  # the rows of the image pool they were taken from

    @classmethod
    def draw(
        cls, images: torch.Tensor, labels: torch.Tensor, canaries: int, num_classes: int, seed: int
    ) -> CanaryExamples:
        """``canaries`` of ``images`` (in the model's input space), each relabelled to another class at random."""
        if canaries > len(images):
            raise ValueError(f"audit.canaries = {canaries}: only {len(images)} test images can serve as canaries")
        rng = np.random.default_rng(derive_seed(seed, "audit-examples"))
        chosen = torch.from_numpy(rng.choice(len(images), size=canaries, replace=False))
        shift = torch.from_numpy(rng.integers(1, num_classes, size=canaries))
        wrong = (labels[chosen].long() + shift) % num_classes
        return cls(images[chosen], wrong, inclusion(canaries, seed), chosen.numpy())

    def inserted(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The included canaries, to append to the host client's data."""
        keep = torch.from_numpy(self.included)
        return self.x[keep], self.y[keep]


@dataclass(frozen=True)
class CanaryClients:
    """Canary client j sends ``norm * u_j`` every round; ``u_j`` is drawn from its own seed when needed
    (a thousand canaries of a million-parameter model would not fit in memory at once)."""

    dimension: int
    included: np.ndarray
    norm: float
    seed: int

    @classmethod
    def draw(cls, canaries: int, dimension: int, norm: float, seed: int) -> CanaryClients:
        return cls(dimension, inclusion(canaries, seed), norm, derive_seed(seed, "audit-directions"))

    def directions(self, chunk: int = 64) -> Iterator[tuple[int, torch.Tensor]]:
        """(first index, unit directions as rows) for consecutive chunks of the canaries."""
        for start in range(0, len(self.included), chunk):
            rows = []
            for j in range(start, min(start + chunk, len(self.included))):
                generator = torch.Generator().manual_seed(derive_seed(self.seed, "direction", j))
                rows.append(torch.randn(self.dimension, generator=generator, dtype=torch.float64))
            block = torch.stack(rows)
            yield start, block / block.norm(dim=1, keepdim=True)

    def inserted_sum(self) -> torch.Tensor:
        """The sum of what the included canary clients send in a round: ``norm * sum_j u_j``."""
        total = torch.zeros(self.dimension, dtype=torch.float64)
        for start, block in self.directions():
            total += block[torch.from_numpy(self.included[start : start + len(block)])].sum(dim=0)
        return self.norm * total

    def cosines(self, change: torch.Tensor) -> np.ndarray:
        """cos(change, u_j) of every canary."""
        change = change.double().reshape(-1)
        scale = float(change.norm()) or 1.0
        out = np.empty(len(self.included))
        for start, block in self.directions():
            out[start : start + len(block)] = (block @ change / scale).numpy()
        return out
