"""``dpsgd``: DP-SGD (Abadi et al. 2016; paper 000, Algorithm 2) on a client's local training, with Opacus.

Opacus does the work: ``GradSampleModule`` computes per-sample gradients, ``DPOptimizer`` clips each to
``max_grad_norm`` (C), sums them, adds N(0, (noise_multiplier * C)^2) and divides by the expected batch
size, and the ``rdp`` / ``prv`` accountants turn the history of (noise multiplier, sampling rate, steps)
into epsilon. What fedsim adds is the federated bookkeeping:

* Batches: with ``poisson_sampling`` every sample joins each step's batch independently with
  probability q = batch_size / N (what the accountants assume), drawn from the round's seeded generator
  rather than Opacus' DataLoader, so the ground-truth store records exactly the sample ids of every
  step. A batch can come out empty; its step still happens and still adds noise (Opacus' own empty-batch
  path: zero clipped sum plus noise). Without ``poisson_sampling`` the usual shuffled batches are used
  and q = batch_size / N is the customary approximation of their privacy.
* Accounting across rounds: the client's history lives in ``privacy_ledger`` (a file per client in the
  run directory), so epsilon grows round by round whichever Ray actor runs the client, and a resumed run
  reports what an uninterrupted one would.
* ``target_epsilon``: the noise multiplier (Opacus' ``get_noise_multiplier``) that reaches it with
  ``delta`` after ``federation.rounds`` x local steps per round. That assumes the client trains in every
  round; a client sampled less often ends below the target, and its ledger reports what it really spent.
* Adjacency: add or remove one sample of the client's own data set (example-level DP for that client).
  ``delta`` defaults to 1e-5, below 1 / N for every partition of fewer than 100,000 samples; a config
  may set another, and every row records the delta its epsilon is for.

Audits (``adversary.privacy_audit``): the plan's canary gradients are added to the sum of clipped per-sample
gradients before the noise, as examples of the batch would be. ``FEDSIM_TEST_DPSGD_NOISE_OFF=1`` in the
environment is a fault injection for tests of that audit: the optimizer adds no noise while the ledger still
records the configured noise multiplier, i.e. DP broken behind the accountant's back. Nothing else reads it.

BatchNorm mixes the samples of a batch, so per-sample gradients do not exist for it: such models fail
with one line before the run starts, unless ``fix_model: true`` has them built with Opacus' replacements
(``ModuleValidator.fix``: BatchNorm -> GroupNorm) on the server, every client and the adversary alike.
"""

from __future__ import annotations

import os
import warnings
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import nn

from clients.defenses.base import DefenseConfig, DefenseEntry, GradientInsertion, TrainingPlan, TrainingSession
from clients.defenses.opacus_text import register_text_rules
from clients.defenses.privacy_ledger import ClientPrivacyLedger, LedgerEntry, epsilon
from clients.defenses.registry import DEFENSES
from fedsim.core.seeding import derive_seed
from fedsim.models import ModelError

if TYPE_CHECKING:  # opacus is imported where DP-SGD runs: configs without it do not pay for it
    from opacus.optimizers import DPOptimizer

# Opacus' backward hook on the first layer sees an input that needs no gradient (the data), and PyTorch
# says so on every step; the per-sample gradients of the layer's own weights are unaffected.
warnings.filterwarnings("ignore", message="Full backward hook is firing when gradients", category=UserWarning)

#: set to "1": DP-SGD adds no noise although its ledger says it did (tests of the privacy audit only)
NOISE_OFF_FOR_TESTS = "FEDSIM_TEST_DPSGD_NOISE_OFF"


class DpsgdDefense(DefenseConfig):
    name: Literal["dpsgd"] = Field("dpsgd", description="DP-SGD (Opacus): per-sample clipping and Gaussian noise")
    max_grad_norm: float = Field(1.0, gt=0, description="per-sample gradient clipping bound C")
    noise_multiplier: float | None = Field(None, ge=0, description="noise std / C (exclusive with target_epsilon)")
    target_epsilon: float | None = Field(
        None, gt=0, description="epsilon to reach after all federation.rounds (assumes the client trains every round)"
    )
    delta: float = Field(
        1e-5, gt=0, lt=1, description="delta of the reported epsilon (adjacency: add/remove one sample)"
    )
    accountant: Literal["rdp", "prv"] = Field("rdp", description="Opacus privacy accountant")
    poisson_sampling: bool = Field(
        True,
        description="Poisson-sampled batches, what the accountants assume; false = shuffled fixed-size batches, "
        "whose epsilon the accountants do not cover (reported only as epsilon_if_poisson)",
    )
    fix_model: bool = Field(False, description="replace layers Opacus cannot handle (BatchNorm -> GroupNorm)")

    @model_validator(mode="after")
    def _one_noise_source(self) -> DpsgdDefense:
        if (self.noise_multiplier is None) == (self.target_epsilon is None):
            raise ValueError(
                f"noise_multiplier = {self.noise_multiplier} and target_epsilon = {self.target_epsilon}: "
                "set exactly one of them"
            )
        return self

    @property
    def builds_dp_compatible_model(self) -> bool:
        return self.fix_model


def unsupported_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Trainable layers Opacus cannot give per-sample gradients for: those with buffers (BatchNorm's running
    statistics, which mix the samples of a batch) or failing one of Opacus' ``ModuleValidator`` checks."""
    from opacus.utils.module_utils import trainable_modules  # importing opacus takes seconds: only DP runs do
    from opacus.validators import ModuleValidator

    return [
        (name, layer)
        for name, layer in trainable_modules(model)
        if any(True for _ in layer.buffers(recurse=False))
        or (type(layer) in ModuleValidator.VALIDATORS and ModuleValidator.VALIDATORS[type(layer)](layer))
    ]


def check_model(model: nn.Module, config: DpsgdDefense) -> None:
    """One-line ModelError naming the first layer DP-SGD cannot train, and the way out."""
    unsupported = unsupported_layers(model)
    if unsupported:
        name, layer = unsupported[0]
        more = f" (and {len(unsupported) - 1} more)" if len(unsupported) > 1 else ""
        way_out = (
            "fix_model: true did not replace it (Opacus has no replacement, or the model was not built with "
            "dp_compatible=True); use a model without such layers"
            if config.fix_model
            else "set fix_model: true on the dpsgd defense to build the model with Opacus' replacements "
            "(BatchNorm -> GroupNorm), or use model.norm: group"
        )
        raise ModelError(
            f"dpsgd: layer '{name}' ({type(layer).__name__}){more} is not supported by Opacus: it has no "
            f"per-sample gradients; {way_out}"
        )


def poisson_schedule(num_samples: int, sample_rate: float, steps: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Positions of every step's batch: each sample joins each batch independently with ``sample_rate``."""
    return [np.flatnonzero(rng.random(num_samples) < sample_rate) for _ in range(steps)]


@lru_cache(maxsize=64)
def noise_for_budget(target_epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str) -> float:
    """The noise multiplier that spends at most ``target_epsilon`` over ``steps`` steps (Opacus' binary search)."""
    from opacus.accountants.utils import get_noise_multiplier

    return float(
        get_noise_multiplier(
            target_epsilon=target_epsilon,
            target_delta=delta,
            sample_rate=sample_rate,
            steps=steps,
            accountant=accountant,
        )
    )


def insert_before_noise(optimizer: DPOptimizer, canaries: GradientInsertion) -> None:
    """Have ``optimizer`` add the canaries' gradients to its clipped sum just before it adds the noise."""
    add_noise = optimizer.add_noise

    def add_canaries_then_noise() -> None:
        inserted = canaries.step_gradients([parameter.summed_grad for parameter in optimizer.params])
        if inserted is not None:
            for parameter, gradient in zip(optimizer.params, inserted, strict=True):
                parameter.summed_grad.add_(gradient)
        add_noise()

    optimizer.add_noise = add_canaries_then_noise


class DpsgdSession(TrainingSession):
    """One round under DP-SGD: the model wrapped in a GradSampleModule, the optimizer in a DPOptimizer."""

    inserts_canaries = True
    clips_per_sample = True

    def __init__(self, config: DpsgdDefense, plan: TrainingPlan) -> None:
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer

        register_text_rules(plan.model)
        check_model(plan.model, config)
        self.config = config
        self.context = plan.context
        self.steps = plan.steps
        self.sample_rate = plan.batch_size / plan.num_samples
        self.delta = config.delta
        if config.noise_multiplier is not None:
            self.noise_multiplier = config.noise_multiplier
        else:
            assert config.target_epsilon is not None  # the config allows exactly one of the two
            planned = plan.steps * plan.context.planned_rounds
            self.noise_multiplier = noise_for_budget(
                config.target_epsilon, self.delta, self.sample_rate, planned, config.accountant
            )
        schedule = (
            poisson_schedule(plan.num_samples, self.sample_rate, plan.steps, plan.rng)
            if config.poisson_sampling
            else None
        )
        device = next(plan.model.parameters()).device
        noise = torch.Generator(device=device).manual_seed(derive_seed(plan.seed, "dpsgd-noise"))
        broken = os.environ.get(NOISE_OFF_FOR_TESTS) == "1"
        optimizer = DPOptimizer(
            plan.optimizer,
            noise_multiplier=0.0 if broken else self.noise_multiplier,
            max_grad_norm=config.max_grad_norm,
            expected_batch_size=plan.batch_size,
            loss_reduction="mean",
            generator=noise,
        )
        if plan.canaries is not None:
            insert_before_noise(optimizer, plan.canaries)
        self._plain = plan.model
        # Wrapped last: nothing above may fail with hooks left on the client's cached model.
        self._wrapped = GradSampleModule(plan.model, loss_reduction="mean")
        super().__init__(self._wrapped, optimizer, schedule)

    def finish(self) -> dict[str, float]:
        entry = LedgerEntry(self.context.server_round, self.noise_multiplier, self.sample_rate, self.steps)
        # The epsilon spent by the end of this round: a resumed run's rerun of round r reports what the
        # uninterrupted run did, although the ledger may already hold round r + 1.
        ledger = ClientPrivacyLedger(self.context.state_dir).record(entry)
        history = [kept for kept in ledger if kept.round <= entry.round]
        spent = epsilon(history, self.delta, self.config.accountant)
        # Only Poisson batches are what the accountant analyses; anything else is labelled, never a guarantee.
        accounted = {"epsilon": spent} if self.config.poisson_sampling else {"epsilon_if_poisson": spent}
        return {
            **accounted,
            "accountant_covers": float(self.config.poisson_sampling),
            "delta": self.delta,
            "noise_multiplier": self.noise_multiplier,
            "sample_rate": self.sample_rate,
            "steps": float(self.steps),
            "total_steps": float(sum(kept.steps for kept in history)),
        }

    def close(self) -> None:
        self._wrapped.to_standard_module()  # removes Opacus' hooks and per-sample gradients
        for parameter in self._plain.parameters():
            if hasattr(parameter, "summed_grad"):  # DPOptimizer's clipped sum, on every parameter
                del parameter.summed_grad


DEFENSES.register(
    "dpsgd",
    help="DP-SGD (Opacus): per-sample clipping, Gaussian noise, RDP/PRV epsilon across rounds",
    config=DpsgdDefense,
)(DefenseEntry(kind="training", train=DpsgdSession, check_model=check_model))
