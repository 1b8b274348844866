"""From an AttackerView to what gets matched, and the dummy-side simulation that produces its counterpart.

Three cases, all expressed in "gradient units" (the update divided by the learning rate), so that one
L2 weight means the same thing in each:

* one local step, learning rate known: the observed gradient is ``(w_t - w_{t+1}) / lr`` and the dummy
  side is the gradient of the mean cross-entropy of the dummy batch (DLG, Zhu et al. 2019, eq. 2). For an
  aggregate of one-step client updates with equal sample counts, FedAvg's average is exactly the mean
  gradient of the union of the clients' samples, so the same case applies with ``num_samples`` = union.
* several local steps (FedAvg, Inverting Gradients section 5, Geiping et al. 2020): the dummy side
  unrolls the client's plain SGD (``clients.training.train_locally``: CrossEntropy with mean reduction,
  ``batch_schedule``) on the dummy batch and returns ``(w_0 - w_K) / lr``, matched against the observed
  delta over lr. The client draws a fresh permutation every epoch and the attacker does not know it;
  since each dummy sample carries a recovered label, the order matters (which label trains first). Restart
  r walks the dummy batch in the r-th order of an enumeration of the per-epoch permutations (restart 0:
  the identity, as Geiping et al.'s ``loss_steps``), so ``restarts`` >= (N!)^epochs tries every order and
  the lowest objective picks one, without ground truth.
* an aggregate of one-step client updates: FedAvg weighs client k's gradient (the mean over its own batch
  of b_k samples) by its share n_k / N, so the dummy batch is split into the view's ``groups`` and the
  dummy gradient is ``sum_k share_k * grad(mean loss of group k)``: per sample n_k / (N b_k), and each
  group through its own forward pass, so BatchNorm normalises it with its own batch statistics as the
  client's training did.
* unknown local training (``view.local_training is None``): one step with an unknown learning rate is
  assumed; the delta itself is the target and the distance is made scale-free
  (``objective.gradient_distance(scale_free=True)``).

The client's SGD is simulated exactly as PyTorch runs it: weight decay adds ``weight_decay * w`` to every
gradient, and momentum keeps ``buffer = momentum * buffer + gradient`` (the first buffer is the gradient),
stepping ``w -= lr * buffer``. One step is therefore the gradient plus ``weight_decay * w_t`` whatever the
momentum. Adam is not simulated: the config refuses it for an attacker that knows the local training.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn

from adversary.view import AttackerView

Params = dict[str, torch.Tensor]


@dataclass(frozen=True)
class MatchSpec:
    """How every target of one batched group is matched (the group shares it by construction)."""

    lr: float | None  # the client's learning rate; None = unknown (scale-free matching)
    num_samples: int
    batch_size: int  # the client's, capped at num_samples
    steps: int  # local steps; 1 = one gradient of all num_samples samples
    groups: tuple[tuple[int, float], ...] = ()  # an aggregate's (samples, share) per client, in dummy order
    momentum: float = 0.0
    weight_decay: float = 0.0

    @property
    def scale_free(self) -> bool:
        return self.lr is None

    @property
    def unrolled(self) -> bool:
        """More than one step: the update is not a single gradient and must be simulated."""
        return self.steps > 1

    def schedule(self, restart: int) -> list[list[int]]:
        """Dummy-sample indices of every local step for ``restart`` (``clients.training.batch_schedule`` with
        the epoch permutations taken from the enumeration described in the module docstring)."""
        n, size = self.num_samples, self.batch_size
        per_epoch = math.ceil(n / size)
        epochs = math.ceil(self.steps / per_epoch)
        orders = math.factorial(n)
        steps: list[list[int]] = []
        for epoch in range(epochs):
            order = nth_permutation(n, (restart // orders**epoch) % orders)
            steps.extend(order[i : i + size] for i in range(0, n, size))
        return steps[: self.steps]


def nth_permutation(n: int, index: int) -> list[int]:
    """The ``index``-th permutation of range(n) in lexicographic order (factorial number system)."""
    pool = list(range(n))
    out = []
    for place in range(n, 0, -1):
        digit, index = divmod(index, math.factorial(place - 1))
        out.append(pool.pop(digit))
    return out


def match_spec(view: AttackerView) -> MatchSpec:
    n = view.num_samples
    training = view.local_training
    if training is None or training.local_steps == 1:
        # One step: every one of the num_samples samples is behind the gradient.
        groups = view.groups if len(view.groups) > 1 else ()
        lr, decay = (None, 0.0) if training is None else (training.lr, training.weight_decay)
        return MatchSpec(lr=lr, num_samples=n, batch_size=n, steps=1, groups=groups, weight_decay=decay)
    if len(view.groups) > 1:
        raise ValueError(f"{view.target}: an aggregate of several clients' unrolled local training cannot be simulated")
    return MatchSpec(
        lr=training.lr,
        num_samples=n,
        batch_size=min(training.batch_size, n),
        steps=training.local_steps,
        momentum=training.momentum,
        weight_decay=training.weight_decay,
    )


def observed_target(
    view: AttackerView, names: list[str], device: torch.device, dtype: torch.dtype
) -> list[torch.Tensor]:
    """The observed update in gradient units, ``(w_t - w_{t+1}) / lr`` (the bare delta when lr is unknown)."""
    delta = view.parameter_delta()
    scale = 1.0 if view.local_training is None else 1.0 / view.local_training.lr
    return [delta[name].detach().to(device=device, dtype=dtype) * scale for name in names]


def observed_mean_gradient(view: AttackerView, names: list[str]) -> tuple[dict[str, torch.Tensor], bool]:
    """The mean per-step gradient ``delta / (lr * local_steps)`` and whether its scale is known.

    Over whole epochs each sample enters the per-step means equally often, so this approximates the
    full-batch mean gradient (exact for one step); label recovery reads it.
    """
    delta = view.parameter_delta()
    training = view.local_training
    if training is None:
        return {name: delta[name].detach() for name in names}, False
    factor = 1.0 / (training.lr * training.local_steps)
    # weight decay's share of the update, at the starting weights (exact for one step)
    decay = {name: training.weight_decay * view.global_state[name].detach() for name in names}
    return {name: delta[name].detach() * factor - decay[name] for name in names}, True


def simulated_update(
    spec: MatchSpec,
    forward: Callable[[Params, torch.Tensor], tuple[torch.Tensor, tuple]],
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    params: Params,
    x: torch.Tensor,
    probs: torch.Tensor,
    names: list[str],
    schedule: Sequence[torch.Tensor] = (),
    autograd: bool = False,
    penalty: Callable[[Params, torch.Tensor], Params] | None = None,
    per_sample_clip: float | None = None,
) -> tuple[list[torch.Tensor], tuple]:
    """The dummy batch's update in gradient units, and the BN statistics of its first forward.

    ``forward(params, x) -> (logits, bn_stats)``; ``loss(logits, probs)`` is the client's loss with the
    (soft or one-hot) dummy labels ``probs``; ``schedule`` holds the dummy-sample indices of every step
    when unrolling (``MatchSpec.schedule`` as tensors). Written with ``torch.func.grad`` so that it is
    differentiable w.r.t. ``x`` and ``probs`` and vmappable over problems. ``autograd``: plain
    ``torch.autograd.grad(create_graph=True)`` instead, for one problem outside any transform (faster; its
    ``params`` must require grad). ``penalty(params, batch) -> {name: gradient}``: a training defense's extra
    gradient term (``pdp_penalty``), added to every step's gradient. ``per_sample_clip``: DP-SGD's step instead of
    the batch gradient, the sum of the per-sample gradients each clipped to that norm over the batch size
    (``clipped_batch_gradient``; no BN statistics: DP-SGD's models have no BatchNorm).
    """

    def step_loss(p: Params, xb: torch.Tensor, qb: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        if not spec.groups:
            logits, stats = forward(p, xb)
            return loss(logits, qb), stats
        # an aggregate: each client's share of the mean loss over its own group, through its own forward
        total: torch.Tensor | float = 0.0
        start, first_stats = 0, cast(tuple, ())
        for size, share in spec.groups:
            logits, stats = forward(p, xb[start : start + size])
            total = total + share * loss(logits, qb[start : start + size])
            first_stats = first_stats or stats
            start += size
        return cast(torch.Tensor, total), first_stats  # a tensor: spec.groups is not empty

    if per_sample_clip is not None:
        if spec.groups:
            raise ValueError("per-sample clipping cannot be simulated on an aggregate of several clients")
        plain_step_grad = clipped_batch_gradient(torch.func.grad(step_loss, has_aux=True), per_sample_clip)
    else:
        plain_step_grad = _autograd_grad(step_loss) if autograd else torch.func.grad(step_loss, has_aux=True)

    def step_grad(p: Params, xb: torch.Tensor, qb: torch.Tensor) -> tuple[Params, tuple]:
        grads, stats = plain_step_grad(p, xb, qb)
        if penalty is not None:
            if spec.groups:
                raise ValueError("a training penalty cannot be simulated on an aggregate of several clients")
            extra = penalty(p, xb)
            grads = {name: grads[name] + extra[name] if name in extra else grads[name] for name in grads}
        return grads, stats

    decay = spec.weight_decay
    if not spec.unrolled:
        grads, stats = step_grad(params, x, probs)
        return [grads[name] + decay * params[name] if decay else grads[name] for name in names], stats
    lr = spec.lr
    assert lr is not None  # unrolled views always carry their local training
    current = dict(params)
    buffers: dict[str, torch.Tensor] = {}
    first_stats: tuple = ()
    for index, batch in enumerate(schedule):
        grads, stats = step_grad(current, x.index_select(0, batch), probs.index_select(0, batch))
        if index == 0:
            first_stats = stats
        for name in names:
            grad = grads[name] + decay * current[name] if decay else grads[name]
            buffers[name] = spec.momentum * buffers[name] + grad if name in buffers and spec.momentum else grad
        current = {name: current[name] - lr * buffers[name] for name in names}
    return [(params[name] - current[name]) / lr for name in names], first_stats


def clipped_batch_gradient(
    sample_grad: Callable[[Params, torch.Tensor, torch.Tensor], tuple[Params, tuple]], max_norm: float
) -> Callable[[Params, torch.Tensor, torch.Tensor], tuple[Params, tuple]]:
    """DP-SGD's step direction before its noise (Opacus' DPOptimizer): every sample's gradient scaled by
    min(1, C / (|g_i| + 1e-6)), |g_i| its norm over all parameters, summed and divided by the batch size.

    ``sample_grad`` is ``torch.func.grad`` of the mean loss; vmapped over single samples it gives the per-sample
    gradients, and it composes with an outer ``vmap`` / ``grad`` or plain autograd alike."""

    def one_sample(p: Params, xi: torch.Tensor, qi: torch.Tensor) -> Params:
        grads, _ = sample_grad(p, xi[None], qi[None])
        return grads

    def step_grad(p: Params, xb: torch.Tensor, qb: torch.Tensor) -> tuple[Params, tuple]:
        per_sample = torch.func.vmap(one_sample, in_dims=(None, 0, 0))(p, xb, qb)
        norms = torch.sqrt(
            cast(torch.Tensor, sum(g.reshape(g.shape[0], -1).pow(2).sum(dim=1) for g in per_sample.values()))
        )
        factor = torch.clamp(max_norm / (norms + 1e-6), max=1.0)
        batch = xb.shape[0]
        clipped = {
            name: (g * factor.reshape(-1, *([1] * (g.dim() - 1)))).sum(dim=0) / batch for name, g in per_sample.items()
        }
        return clipped, ()

    return step_grad


def _autograd_grad(step_loss: Callable[..., tuple[torch.Tensor, tuple]]) -> Callable[..., tuple[Params, tuple]]:
    """``torch.func.grad(step_loss, has_aux=True)`` with plain autograd, keeping the graph for the outer gradient."""

    def step_grad(p: Params, xb: torch.Tensor, qb: torch.Tensor) -> tuple[Params, tuple]:
        value, stats = step_loss(p, xb, qb)
        grads = torch.autograd.grad(value, list(p.values()), create_graph=True)
        return dict(zip(p, grads)), stats

    return step_grad


def pdp_penalty(module: nn.Module, kappa: float) -> Callable[[Params, torch.Tensor], Params]:
    """PDP-SGD's penalty gradient (paper 000, eq. 13; ``clients.defenses.pdpsgd``) on the attacker's model.

    The client trains on L + kappa * sum over Linear/Conv weights of sum W^2 x^2 with the layer input x
    detached, so each weight's gradient gains exactly ``2 kappa W * A``, A the batch mean of the squared
    input that each weight entry multiplies (summed over positions for a convolution). Returned as a
    function of the parameters and the batch: one extra forward captures every layer's input; the term is
    a function of the dummy batch, so the attack differentiates through it.
    """
    layers = [(name, layer) for name, layer in module.named_modules() if isinstance(layer, _PENALISED)]
    for name, layer in layers:
        if isinstance(layer, nn.Conv2d) and (layer.padding_mode != "zeros" or isinstance(layer.padding, str)):
            raise ValueError(
                f"pdp penalty: layer '{name}' pads with '{layer.padding_mode}' / {layer.padding!r}; "
                "only numeric zero padding is simulated"
            )

    def gradients(params: Params, x: torch.Tensor) -> Params:
        captured: dict[str, torch.Tensor] = {}
        hooks = [
            layer.register_forward_pre_hook(lambda _m, args, name=name: captured.__setitem__(name, args[0]))
            for name, layer in layers
        ]
        try:
            torch.func.functional_call(module, params, (x,))
        finally:
            for hook in hooks:
                hook.remove()
        out = {}
        for name, layer in layers:
            weight = params[f"{name}.weight"]
            out[f"{name}.weight"] = 2.0 * kappa * weight * _input_energy(layer, captured[name], weight.shape)
        return out

    return gradients


_PENALISED = (nn.Linear, nn.Conv2d)


def _input_energy(layer: nn.Module, x: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Batch mean of the squared input entry each weight entry multiplies, broadcastable to the weight."""
    n = x.shape[0]
    squared = x**2
    if isinstance(layer, nn.Linear):
        return (squared.reshape(-1, squared.shape[-1]).sum(dim=0) / n)[None, :]
    assert isinstance(layer, nn.Conv2d)  # the layers penalised are _PENALISED's
    patches = torch.nn.functional.unfold(
        squared,
        layer.kernel_size,
        dilation=layer.dilation,
        padding=cast(tuple[int, ...], layer.padding),
        stride=layer.stride,
    )
    energy = patches.sum(dim=(0, 2)) / n  # (C * kh * kw,)
    out_channels, per_group = shape[0], shape[1]
    groups = layer.groups
    energy = energy.reshape(groups, per_group, *shape[2:])
    return energy.repeat_interleave(out_channels // groups, dim=0)
