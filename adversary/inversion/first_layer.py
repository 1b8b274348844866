"""What the closed-form attacks on a first fully-connected layer share (``fc-invert``, ``cpa``).

A first layer y = W x + b on the flattened input x receives, from a batch of images x_i, the gradient

    dL/dW = sum_i g_i x_i^T        dL/db = sum_i g_i          (g_i = dL/dy at image i, a vector over units)

so every row of the weight update is a combination of the images with the coefficients of the bias
update in the same row. This holds for the update a client sends after any number of plain SGD steps
(with or without momentum): every step adds such a gradient, each image with its own g (the images of a
step's batch, at that step's weights), and the update is a sum of steps with positive factors. It holds
for a FedAvg or SecAgg+ aggregate of such updates (a weighted sum), and whatever the learning rate.
Weight decay adds a multiple of the weights to every step; after K steps the update holds
(1 - a_K) * W_0 besides the images' part, where a_K follows from the learning rate, momentum and weight
decay alone (``_weight_decay_share``), so an attacker that knows the local training subtracts it.
Adam divides every entry by its own running scale and breaks the structure: the attacks refuse it.

Labels (both attacks): the coefficient column of a recovered image (its g, scaled by the learning rate
and its FedAvg share: fitted by least squares, dW ~ H X) is compared with the first-layer gradient
dCE(f(x), c)/dy that each class c would give at the recovered image under the round's weights (the
model's Jacobian at x, two passes per class); the class of highest cosine is the label. At an exact
image and an exact column the true class gives cosine 1. No ground truth and no label rule from the
classifier layer is used; granted labels (adversary.knows.labels) are assigned to the images the same
way, by the best one-to-one assignment of the cosines.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence

import torch
from torch import nn

from adversary.inversion.requirements import AttackSetting, named_first_weighted_layer
from adversary.view import AttackerView, Reconstruction


def first_layer_refusal(attack: str, setting: AttackSetting) -> str | None:
    """One line saying why ``attack`` cannot read the first layer of ``setting``'s model and training, or None."""
    model, model_name = setting.model, setting.model_name
    named = named_first_weighted_layer(model)
    if named is None:
        return f"{attack} inverts a first nn.Linear on the flattened input; {model_name} has no weighted layer"
    name, layer = named
    if not isinstance(layer, nn.Linear):
        return (
            f"{attack} inverts a first nn.Linear on the flattened input; the first weighted layer of {model_name} "
            f"is '{name}' ({type(layer).__name__})"
        )
    if layer.bias is None:
        return f"{attack} reads each image's scale off the first layer's bias; '{name}' of {model_name} has no bias"
    if not _sees_flattened_input(model, name, setting.input_shape):
        return (
            f"{attack} inverts a first nn.Linear on the flattened input; '{name}' of {model_name} receives "
            "something computed from the images, not the images themselves"
        )
    if setting.optimizer != "sgd":
        return (
            f"{attack} needs updates that are sums of gradients; client.optimizer = '{setting.optimizer}' rescales "
            "every entry on its own (allowed: sgd)"
        )
    if setting.weight_decay > 0 and not setting.knows_local_training:
        return (
            f"{attack} removes client.weight_decay = {setting.weight_decay} from the update only when "
            "adversary.knows.local_training: true"
        )
    if setting.weight_decay > 0 and setting.targets != "per-client" and setting.local_steps != 1:
        return (
            f"{attack} removes client.weight_decay = {setting.weight_decay} from an aggregate only after one local "
            f"step; client.local_steps is {setting.local_steps}"
        )
    return None


def _sees_flattened_input(model: nn.Module, layer_name: str, input_shape: tuple[int, int, int]) -> bool:
    """Whether the layer's input, on a forward pass of two random images, is exactly the flattened images."""
    probe = copy.deepcopy(model).eval()
    images = torch.rand(2, *input_shape, generator=torch.Generator().manual_seed(0))
    seen: list[torch.Tensor] = []
    handle = dict(probe.named_modules())[layer_name].register_forward_hook(
        lambda _m, inputs, _o: seen.append(inputs[0])
    )
    try:
        with torch.no_grad():
            probe(images.to(next(probe.parameters()).dtype))
    finally:
        handle.remove()
    return (
        len(seen) == 1
        and seen[0].shape == (2, images[0].numel())
        and torch.allclose(seen[0].float(), images.flatten(1), atol=1e-6)
    )


def first_layer_update(view: AttackerView) -> tuple[str, torch.Tensor, torch.Tensor]:
    """The first layer's name and its update's images' part, (units, D) and (units,), float64 on the CPU.

    The update is w_t - w_(t+1) (a positive multiple of the gradients; weight decay removed when the view's
    local training has it)."""
    named = named_first_weighted_layer(view.model)
    if named is None or not isinstance(named[1], nn.Linear) or named[1].bias is None:
        found = "none" if named is None else f"'{named[0]}' ({type(named[1]).__name__})"
        raise ValueError(f"the view's model has no first nn.Linear with a bias (first weighted layer: {found})")
    name = named[0]
    delta = view.parameter_delta()
    weight, bias = delta[f"{name}.weight"].double().cpu(), delta[f"{name}.bias"].double().cpu()
    training = view.local_training
    if training is not None and training.weight_decay > 0:
        share = _weight_decay_share(training.lr, training.momentum, training.weight_decay, training.local_steps)
        weight = weight - share * view.global_state[f"{name}.weight"].double().cpu()
        bias = bias - share * view.global_state[f"{name}.bias"].double().cpu()
    return name, weight, bias


def _weight_decay_share(lr: float, momentum: float, weight_decay: float, steps: int) -> float:
    """1 - a_K: the multiple of the starting weights in K steps of PyTorch's SGD whose only gradient is the decay.

    The decay term is linear in the weights, and the images' part of each row stays in the span of the images,
    so the starting weights' factor a follows its own recurrence: g = wd * a, buffer = momentum * buffer + g
    (the first buffer is g), a -= lr * buffer."""
    factor, buffer = 1.0, 0.0
    for step in range(steps):
        gradient = weight_decay * factor
        buffer = gradient if step == 0 else momentum * buffer + gradient
        factor -= lr * buffer
    return 1.0 - factor


def out_of_bounds(images: torch.Tensor, view: AttackerView) -> torch.Tensor:
    """Per row (K, D): mean distance of its pixels outside the view's input bounds, relative to the range."""
    if view.input_bounds is None:
        return torch.zeros(len(images), dtype=images.dtype)
    channels = view.input_shape[0]
    low, high = (b.double().reshape(1, channels, 1) for b in view.input_bounds)
    pixels = images.reshape(len(images), channels, -1)
    outside = (low - pixels).clamp(min=0) + (pixels - high).clamp(min=0)
    return (outside / (high - low)).mean(dim=(1, 2))


def coefficients(weight_update: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
    """H (units, N) with weight_update ~ H @ images.flatten(1): each image's coefficient column, least squares."""
    flat = images.double().flatten(1)
    return torch.linalg.lstsq(flat.T, weight_update.T, driver="gelsd").solution.T


def gradient_labels(view: AttackerView, layer_name: str, images: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """int64 labels of ``images`` (N, C, H, W; model space): the class whose first-layer gradient at each image
    best matches its coefficient column (``columns``, (units, N)); granted labels are assigned by the same match."""
    scores = _label_cosines(view, layer_name, images, columns)  # (N, classes)
    if view.labels is None:
        return scores.argmax(dim=1).to(torch.int64)
    granted = view.labels.detach().cpu().to(torch.int64).reshape(-1)
    cost = -scores[:, granted].numpy()  # image n against granted label slot k
    from scipy.optimize import linear_sum_assignment  # scipy.optimize takes a while to import: only this needs it

    rows, slots = linear_sum_assignment(cost)
    labels = scores.argmax(dim=1).to(torch.int64)
    labels[torch.as_tensor(rows)] = granted[torch.as_tensor(slots)]
    return labels


def _label_cosines(view: AttackerView, layer_name: str, images: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    model = copy.deepcopy(view.model).double().eval()
    model.load_state_dict({k: v.double() if v.is_floating_point() else v for k, v in view.global_state.items()})
    layer = dict(model.named_modules())[layer_name]
    outputs: list[torch.Tensor] = []

    def as_leaf(_module: nn.Module, _inputs: tuple, output: torch.Tensor) -> torch.Tensor:
        leaf = output.detach().requires_grad_(True)  # the units' pre-activations, where g is taken
        outputs.append(leaf)
        return leaf

    handle = layer.register_forward_hook(as_leaf)
    try:
        logits = model(images.double())
    finally:
        handle.remove()
    (units,) = outputs
    probabilities = torch.softmax(logits, dim=1).detach()
    # dCE(f(x), c)/dy = J^T p - J^T e_c, J the logits' Jacobian in y; images are independent, so the gradient
    # of a class's logit summed over the batch gives every image's row of J at once
    jacobian = torch.stack(
        [
            torch.autograd.grad(logits[:, c].sum(), units, retain_graph=c < view.num_classes - 1)[0]
            for c in range(view.num_classes)
        ],
        dim=1,
    )  # (N, classes, units)
    expected = torch.einsum("nc,ncu->nu", probabilities, jacobian)
    per_class = expected[:, None, :] - jacobian  # (N, classes, units)
    observed = columns.T.double()[:, None, :]  # (N, 1, units)
    return torch.nn.functional.cosine_similarity(per_class, observed, dim=2).detach()


def each_view_in_closed_form(solve: Callable) -> Callable:
    """The attack function of a closed-form attack: ``solve(view, options, seed)`` gives one view's images
    (float64), labels and objective; views are solved one after the other, without restarts or iterations."""

    def attack(views: Sequence[AttackerView], options, seed: int, device: torch.device) -> list[Reconstruction]:
        results = []
        for view in views:
            start = time.perf_counter()
            images, labels, objective = solve(view, options, seed)
            results.append(
                Reconstruction(
                    images=images.float(),
                    labels=labels,
                    objective=objective,
                    restart_objectives=(),
                    iterations=0,
                    seconds=time.perf_counter() - start,
                )
            )
        return results

    return attack
