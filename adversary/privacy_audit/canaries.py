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
  random unit direction, every round; with ``norm`` the clipping bound it passes clipping unchanged. Under
  ``strategy.dp`` the server adds them to the clipped sum; under SecAgg+ the sampled clients carry them inside
  the vectors they mask (``CarriedCanaries``), since the server sees only the unmasked sum.

A plan is drawn from the run's seed alone, so every process that needs it (the host client, the auditor)
draws the same one; which canaries were included is ground truth, used only to check the auditor's guesses.
"""

from __future__ import annotations

import functools
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

    def direction(self, j: int) -> torch.Tensor:
        """``u_j``: canary j's unit direction, drawn from its own seed."""
        generator = torch.Generator().manual_seed(derive_seed(self.seed, "direction", j))
        row = torch.randn(self.dimension, generator=generator, dtype=torch.float64)
        return row / row.norm()

    def directions(self, chunk: int = 64) -> Iterator[tuple[int, torch.Tensor]]:
        """(first index, unit directions as rows) for consecutive chunks of the canaries."""
        for start in range(0, len(self.included), chunk):
            yield start, torch.stack([self.direction(j) for j in range(start, min(start + chunk, len(self.included)))])

    def inserted_sum(self) -> torch.Tensor:
        """The sum of what the included canary clients send in a round: ``norm * sum_j u_j``."""
        total = torch.zeros(self.dimension, dtype=torch.float64)
        for start, block in self.directions():
            total += block[torch.from_numpy(self.included[start : start + len(block)])].sum(dim=0)
        return self.norm * total

    def carried_sum(self, slot: int, slots: int) -> torch.Tensor:
        """``norm * sum_j u_j`` over the included canaries of ``slot`` (those with ``j % slots == slot``): what one
        of ``slots`` carriers adds, so that together they add ``inserted_sum``."""
        if not 0 <= slot < slots:
            raise ValueError(f"canary slot {slot} of {slots}: must be in 0 .. {slots - 1}")
        total = torch.zeros(self.dimension, dtype=torch.float64)
        for j in np.flatnonzero(self.included)[slot::slots]:
            total += self.direction(int(j))
        return self.norm * total

    def cosines(self, change: torch.Tensor) -> np.ndarray:
        """cos(change, u_j) of every canary."""
        change = change.double().reshape(-1)
        scale = float(change.norm()) or 1.0
        out = np.empty(len(self.included))
        for start, block in self.directions():
            out[start : start + len(block)] = (block @ change / scale).numpy()
        return out


def by_parameter(flat: torch.Tensor, shapes: Sequence[tuple[str, Sequence[int]]]) -> dict[str, torch.Tensor]:
    """A flat vector over the trainable parameters cut into them: ``shapes`` are (name, shape) in order."""
    sizes = [int(np.prod(shape)) for _, shape in shapes]
    if sum(sizes) != flat.numel():
        raise ValueError(f"a vector of {flat.numel()} entries over parameters of {sum(sizes)}")
    pieces = torch.split(flat, sizes)
    return {name: piece.reshape(tuple(shape)) for (name, shape), piece in zip(shapes, pieces, strict=True)}


@dataclass(frozen=True)
class CarriedCanaries:
    """Canary clients under SecAgg+ (pickled into every client process): the server sees only the unmasked sum,
    so each round every sampled client carries a slot of the canary clients inside the vector it masks.

    The strategy tells each sampled client its slot, the number of slots (the clients sampled) and the canary
    clients' weight ``w`` (examples); the client adds ``(w / n) * norm * sum u_j`` over its slot's included
    canaries to its trainable parameters (``n``: its own examples), so that after SecAgg+'s weighting by ``n``
    each canary client adds ``w * norm * u_j`` to the weighted sum the server unmasks, as a client of ``w``
    examples sending the update ``norm * u_j`` would. Its weight is not added to the denominator (as under
    ``strategy.dp``'s fixed denominator): the real clients' average trains as without the audit, and the
    clear-text counts do not reveal how many canaries were included."""

    canaries: int
    norm: float
    seed: int  # the run's audit seed

    def plan(self, dimension: int) -> CanaryClients:
        """The run's canary clients over ``dimension`` trainable parameters (the auditor draws the same)."""
        return CanaryClients.draw(self.canaries, dimension, self.norm, self.seed)

    def carried(
        self, model: torch.nn.Module, slot: int, slots: int, weight: float, own_examples: int
    ) -> dict[str, torch.Tensor]:
        """What a client of ``own_examples`` adds to each trainable parameter to carry its slot (zeros when it
        has no examples: SecAgg+ would weigh anything it carried by 0)."""
        shapes = [(name, tuple(p.shape)) for name, p in model.named_parameters() if p.requires_grad]
        flat = _carried_sum(self, sum(int(np.prod(shape)) for _, shape in shapes), slot, slots)
        scale = weight / own_examples if own_examples > 0 else 0.0
        return by_parameter(flat * scale, shapes)


@functools.lru_cache(maxsize=4)
def _carried_sum(carried: CarriedCanaries, dimension: int, slot: int, slots: int) -> torch.Tensor:
    # the same every round while the sample size is: drawn once per client process
    return carried.plan(dimension).carried_sum(slot, slots)
