"""One batched inversion problem: the targets of a group of compatible views x the restarts of each.

Views that share the architecture, the global state, num_samples, the local training and the attacker's
knowledge are one problem: the dummy data of every (target, restart) pair is a row of a single variable
``V`` of shape (targets * restarts, D), and the objective of all rows is computed at once by
``vmap`` (over targets) of ``vmap`` (over restarts) of ``grad_and_value`` of the per-problem objective,
whose inner ``torch.func.grad`` gives the dummy's parameter gradient (or unrolled update). The per-row
objectives are independent, so the optimizers in ``optimizers`` treat each row as its own problem.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.func import grad_and_value, vmap

from adversary.inversion.labels import recover_labels
from adversary.inversion.model import AttackerModel, batchnorm_names, victim_batch_statistics
from adversary.inversion.objective import soft_cross_entropy
from adversary.inversion.options import OptimizationOptions
from adversary.inversion.regularizers import REGULARIZERS, Regularizer, RegularizerContext
from adversary.inversion.spec import AttackSpec
from adversary.inversion.targets import MatchSpec, match_spec, observed_target, pdp_penalty, simulated_update
from adversary.view import AttackerView


def group_views(views: Sequence[AttackerView]) -> list[list[int]]:
    """Indices of ``views`` in batchable groups, in order of first appearance."""
    groups: list[list[int]] = []
    for index, view in enumerate(views):
        for group in groups:
            if _compatible(views[group[0]], view):
                group.append(index)
                break
        else:
            groups.append([index])
    return groups


def _compatible(a: AttackerView, b: AttackerView) -> bool:
    if a is b:
        return True
    same_facts = (
        a.input_shape == b.input_shape
        and a.num_classes == b.num_classes
        and a.num_samples == b.num_samples
        and a.local_training == b.local_training
        and (a.labels is None) == (b.labels is None)
        and a.bn_statistics == b.bn_statistics
        and a.groups == b.groups
        and _same_bounds(a.input_bounds, b.input_bounds)
    )
    if not same_facts:
        return False
    if a.model is not b.model and (type(a.model) is not type(b.model) or repr(a.model) != repr(b.model)):
        return False
    names = [name for name, _ in a.model.named_parameters()]
    return all(
        a.global_state[name] is b.global_state[name] or torch.equal(a.global_state[name], b.global_state[name])
        for name in names
    )


def _same_bounds(a: tuple[torch.Tensor, torch.Tensor] | None, b: tuple[torch.Tensor, torch.Tensor] | None) -> bool:
    if a is None or b is None:
        return a is b
    return all(torch.equal(x.cpu(), y.cpu()) for x, y in zip(a, b, strict=True))


def init_seed(seed: int, target: int, restart: int) -> int:
    """The seed of one (target, restart) initialisation: independent of how many problems are batched."""
    return int(np.random.SeedSequence([seed, target, restart]).generate_state(1, dtype=np.uint64)[0] >> 1)


@dataclass
class BatchedProblem:
    """The objective of every (target, restart) row of a group, and the layout of its variables."""

    options: OptimizationOptions
    match: MatchSpec
    model: AttackerModel
    params: dict[str, torch.Tensor]
    targets: list[torch.Tensor]  # observed update x observed_scale per matched parameter, stacked over targets (T, ...)
    masks: list[torch.Tensor]  # per matched parameter, 1 where the entry is matched (T, ...); empty = all entries
    matched: tuple[int, ...]  # indices into model.names of the parameters that are matched
    probs: torch.Tensor  # (T, N, K) one-hot labels (unused with joint labels)
    labels: torch.Tensor | None  # (T, N) int64 on CPU, None with joint labels
    bn_targets: tuple[tuple[torch.Tensor, torch.Tensor], ...]  # victim (mean, var) per BN layer, (T, C) each
    terms: tuple[tuple[float, Regularizer], ...]  # (weight, term) of every regularizer in force, in order
    x_shape: tuple[int, ...]  # (N, C, H, W)
    z_shape: tuple[int, ...] | None  # (N, K) with joint labels
    bounds: tuple[torch.Tensor, torch.Tensor] | None  # (C, 1, 1) low and high, for the box constraint
    schedule: tuple[torch.Tensor, ...]  # unrolled views: dummy-sample indices of each local step, (R, batch) each
    restarts: int
    dtype: torch.dtype
    device: torch.device
    penalty: Callable[[dict[str, torch.Tensor], torch.Tensor], dict[str, torch.Tensor]] | None = None

    @classmethod
    def build(
        cls,
        spec: AttackSpec,
        options: OptimizationOptions,
        views: Sequence[AttackerView],
        restart_ids: Sequence[int],
        device: torch.device,
        dtype: torch.dtype,
    ) -> BatchedProblem:
        first = views[0]
        match = match_spec(first)
        # a term of weight 0 is off (its statistics are not even recorded)
        terms = tuple(
            (float(entry.weight), REGULARIZERS.get(entry.name)) for entry in options.regularizers if entry.weight > 0
        )
        use_bn = any(term.needs_bn_statistics for _, term in terms)
        if spec.bn_prior or use_bn:
            _check_bn_prior(first, spec.name)
            if len(match.groups) > 1:
                raise ValueError(
                    f"{spec.name}: the BatchNorm-statistics prior cannot be matched on an aggregate of "
                    f"{len(match.groups)} clients (each normalised its own batch); attack the clients' updates"
                )
        model = AttackerModel.from_view(first, device, dtype, record_bn=use_bn)
        joint = spec.joint_labels and first.labels is None
        n, k = first.num_samples, first.num_classes
        kept = (lambda observed: entry_mask(observed, options)) if options.match_entries != "all" else None
        labels = None if joint else torch.stack([recover_labels(view, kept) for view in views])
        probs = (
            torch.zeros(len(views), n, k, dtype=dtype, device=device)
            if labels is None
            else torch.nn.functional.one_hot(labels, k).to(device=device, dtype=dtype)
        )
        matched = matched_parameters(model.names, options, spec.name)
        per_view = [observed_target(view, model.names, device, dtype) for view in views]
        observed = [torch.stack(layer) for layer in zip(*per_view, strict=True)]
        masks = [entry_mask(observed[i], options) for i in matched] if options.match_entries != "all" else []
        # unmasked: the attack's gradient_match restricts both sides (a likelihood may read every entry)
        targets = [observed[i] * float(options.observed_scale) for i in matched]
        bn_targets: tuple[tuple[torch.Tensor, torch.Tensor], ...] = ()
        if use_bn:
            stats = [victim_batch_statistics(view, device, dtype) for view in views]
            bn_targets = tuple(
                (torch.stack([s[i][0] for s in stats]), torch.stack([s[i][1] for s in stats]))
                for i in range(len(stats[0]))
            )
        bounds = None
        if spec.box and first.input_bounds is not None:
            low, high = (b.detach().to(device=device, dtype=dtype).reshape(-1, 1, 1) for b in first.input_bounds)
            bounds = (low, high)
        schedule: tuple[torch.Tensor, ...] = ()
        if match.unrolled:
            per_restart = [match.schedule(r) for r in restart_ids]
            schedule = tuple(
                torch.tensor([steps[step] for steps in per_restart], dtype=torch.int64, device=device)
                for step in range(match.steps)
            )
        return cls(
            options=options,
            match=match,
            model=model,
            params=model.parameters_from(first.global_state, device, dtype),
            targets=targets,
            masks=masks,
            matched=matched,
            probs=probs,
            labels=labels,
            bn_targets=bn_targets,
            terms=terms,
            x_shape=(n, *first.input_shape),
            z_shape=(n, k) if joint else None,
            bounds=bounds,
            schedule=schedule,
            restarts=len(restart_ids),
            dtype=dtype,
            device=device,
            penalty=pdp_penalty(model.module, float(options.pdp_kappa)) if options.pdp_kappa else None,
        )

    # ------------------------------------------------------------------------------------ layout

    @property
    def num_targets(self) -> int:
        return self.probs.shape[0]

    @property
    def x_size(self) -> int:
        return int(np.prod(self.x_shape))

    def split(self, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Rows of V -> dummy images (T, R, N, C, H, W) and label logits (T, R, N, K) or None."""
        lead = (self.num_targets, self.restarts)
        x = v[:, : self.x_size].reshape(*lead, *self.x_shape)
        z = v[:, self.x_size :].reshape(*lead, *self.z_shape) if self.z_shape is not None else None
        return x, z

    def initial(self, seed: int, target_ids: Sequence[int], restart_ids: Sequence[int]) -> torch.Tensor:
        """V0: each row drawn from its own generator ``init_seed(seed, target, restart)``, in float64 on CPU.

        Drawing on the CPU in double and casting afterwards gives the same start on every device and at
        every precision. Images: randn * init_scale, U(-init_scale, init_scale) or zeros; DLG's label logits: randn.
        """
        rows = []
        scale = float(self.options.init_scale or 1.0)
        for target in target_ids:
            for restart in restart_ids:
                generator = torch.Generator().manual_seed(init_seed(seed, target, restart))
                if self.options.init == "randn":
                    x = torch.randn(self.x_shape, generator=generator, dtype=torch.float64) * scale
                elif self.options.init == "uniform":
                    x = (torch.rand(self.x_shape, generator=generator, dtype=torch.float64) * 2 - 1) * scale
                else:
                    x = torch.zeros(self.x_shape, dtype=torch.float64)
                parts = [x.reshape(-1)]
                if self.z_shape is not None:
                    parts.append(torch.randn(self.z_shape, generator=generator, dtype=torch.float64).reshape(-1))
                rows.append(torch.cat(parts))
        return torch.stack(rows).to(device=self.device, dtype=self.dtype)

    def project(self, v: torch.Tensor) -> torch.Tensor:
        """The box constraint: images clamped per channel to the valid input range."""
        if self.bounds is None:
            return v
        x, _ = self.split(v)
        clamped = torch.maximum(torch.minimum(x, self.bounds[1]), self.bounds[0])
        return torch.cat([clamped.reshape(v.shape[0], -1), v[:, self.x_size :]], dim=1)

    def labels_of(self, v: torch.Tensor) -> torch.Tensor:
        """(T, R, N) labels: the recovered/granted ones, or the argmax of DLG's soft labels."""
        _, z = self.split(v)
        if z is not None:
            return z.argmax(dim=-1).cpu()
        assert self.labels is not None
        return self.labels[:, None, :].expand(-1, self.restarts, -1)

    # --------------------------------------------------------------------------------- objective

    def objective(
        self,
        variables: tuple[torch.Tensor, ...],
        target: tuple[list[torch.Tensor], list[torch.Tensor]],
        probs: torch.Tensor,
        bn_target: tuple[tuple[torch.Tensor, torch.Tensor], ...],
        schedule: tuple[torch.Tensor, ...],
        autograd: bool = False,
    ) -> torch.Tensor:
        """One problem's objective: gradient distance + the weighted regularizers, in the order listed.

        ``target``: the observed update of the matched parameters and their entry masks (empty: every entry).
        ``autograd``: the dummy's update by plain autograd, for one problem outside torch.func transforms."""
        x = variables[0]
        q = torch.softmax(variables[1], dim=-1) if self.z_shape is not None else probs
        params = {name: p.detach().requires_grad_(True) for name, p in self.params.items()} if autograd else self.params
        update, stats = simulated_update(
            self.match,
            self.model.forward,
            soft_cross_entropy,
            params,
            x,
            q,
            self.model.names,
            schedule,
            autograd,
            self.penalty,
            self.options.per_sample_clip,
        )
        observed, masks = target
        update = [update[i] for i in self.matched]
        value = self.options.gradient_match(update, observed, masks, self.match.scale_free)
        context = RegularizerContext(dummy_bn=stats, victim_bn=bn_target, dummy_update=update, observed_update=observed)
        for weight, regularizer in self.terms:
            value = value + weight * regularizer.term(x, context)
        return value

    def objective_at(self, target: int, x: torch.Tensor, restart: int = 0) -> torch.Tensor:
        """Target ``target``'s objective at the images ``x`` (N, C, H, W) with restart ``restart``'s step order,
        outside any transform (the value at the true images says whether the matching is exact)."""
        return self.objective(
            (x,),
            ([layer[target] for layer in self.targets], [mask[target] for mask in self.masks]),
            self.probs[target],
            tuple((mean[target], var[target]) for mean, var in self.bn_targets),
            tuple(step[restart] for step in self.schedule),
        )

    def evaluate(self, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """f (P,) and df/dV (P, D) of every row, in one vmapped call."""
        if v.shape[0] == 1:
            return self._evaluate_one(v)
        x, z = self.split(v)
        variables = (x,) if z is None else (x, z)
        per_problem = grad_and_value(self.objective)
        targeted = ((self.targets, self.masks), self.probs, self.bn_targets)
        # A vmap level costs ~15 % per evaluation on small CPU problems: a dimension of size one gets none.
        if self.restarts == 1:
            only = tuple(part[:, 0] for part in variables)
            schedule = tuple(step[0] for step in self.schedule)  # the only restart's order of dummy samples
            over_targets = vmap(per_problem, in_dims=(0, 0, 0, 0, None))
            grads, values = over_targets(only, *targeted, schedule)
        elif self.num_targets == 1:
            only = tuple(part[0] for part in variables)
            single = (
                ([layer[0] for layer in self.targets], [mask[0] for mask in self.masks]),
                self.probs[0],
                tuple((mean[0], var[0]) for mean, var in self.bn_targets),
            )
            over_restarts = vmap(per_problem, in_dims=(0, None, None, None, 0))
            grads, values = over_restarts(only, *single, self.schedule)
        else:
            over_restarts = vmap(per_problem, in_dims=(0, None, None, None, 0))
            over_targets = vmap(over_restarts, in_dims=(0, 0, 0, 0, None))
            grads, values = over_targets(variables, *targeted, self.schedule)
        rows = v.shape[0]
        flat = torch.cat([g.reshape(rows, -1) for g in grads], dim=1)
        return values.reshape(rows), flat

    def _evaluate_one(self, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A single row (one target, one restart): plain autograd, without vmap or torch.func's grads, which
        cost about half of each evaluation on small CPU problems (bench/attacks.py part 3). The same f and
        gradient up to float rounding."""
        v = v.detach().requires_grad_(True)
        with torch.enable_grad():
            x, z = self.split(v)
            variables = (x[0, 0],) if z is None else (x[0, 0], z[0, 0])
            value = self.objective(
                variables,
                ([layer[0] for layer in self.targets], [mask[0] for mask in self.masks]),
                self.probs[0],
                tuple((mean[0], var[0]) for mean, var in self.bn_targets),
                tuple(step[0] for step in self.schedule),
                autograd=True,
            )
        (grad,) = torch.autograd.grad(value, v)
        return value.detach().reshape(1), grad


def matched_parameters(names: Sequence[str], options: OptimizationOptions, attack: str) -> tuple[int, ...]:
    """Indices of the parameters that are matched: all but ``options.exclude_layers`` (names or module names)."""
    excluded = tuple(options.exclude_layers)
    unknown = [item for item in excluded if not any(name == item or name.startswith(item + ".") for name in names)]
    if unknown:
        raise ValueError(
            f"{attack}: exclude_layers = {list(excluded)}: the model has no parameter or module "
            f"'{unknown[0]}'; its parameters: {', '.join(names)}"
        )
    kept = tuple(
        i for i, name in enumerate(names) if not any(name == item or name.startswith(item + ".") for item in excluded)
    )
    if not kept:
        raise ValueError(f"{attack}: exclude_layers = {list(excluded)} leaves no parameter to match")
    return kept


def entry_mask(observed: torch.Tensor, options: OptimizationOptions) -> torch.Tensor:
    """1 where an entry of the observed update (as sent, in gradient units) is matched: its nonzero entries, or
    those above the threshold."""
    if options.match_entries == "nonzero":
        return (observed != 0).to(observed.dtype)
    return (observed.abs() > float(options.match_threshold)).to(observed.dtype)


def _check_bn_prior(view: AttackerView, attack: str) -> None:
    if not view.bn_statistics:
        raise ValueError(f"{attack} needs adversary.knows.bn_statistics: true")
    if not batchnorm_names(view.model):
        raise ValueError(f"{attack} needs a model with BatchNorm layers (its prior matches their batch statistics)")
