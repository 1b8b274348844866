"""``rtf``: Robbing the Fed (Fowl, Geiping, Czaja, Goldblum & Goldstein, ICLR 2022), the closed-form read-out.

Needs a malicious server that sent the ``imprint`` modification (``adversary.modifications.imprint``): the
view's model is the imprinted one and its global state the block the server chose. Every row of the block
measures the same direction; sorting the rows by threshold, rows k and k+1 differ only by the samples whose
measurement falls between their thresholds, so with delta = w_t - w_(t+1) (any learning rate, any FedAvg or
SecAgg+ weighting: both parts of a row scale alike)

    x = (dW_k - dW_(k+1)) / (db_k - db_(k+1))

is exactly the image when one image alone fell into bin k, and a weighted mean of the images when several
did. Bins whose bias difference is below ``threshold`` times the largest are empty (their ratio would be
noise); every other bin is a candidate.

The attack returns exactly ``num_samples`` reconstructions (the attacker knows how many images the update
holds: the replies' example counts), chosen without the truth. A candidate is *plausible* when its read-out
is a valid input: its RMS excursion outside the view's ``input_bounds`` is at most ``box_tolerance`` of the
bounds' width. The criterion follows from the read-out itself: an image alone in its bin comes back as that
image, and images sharing a bin whose gradients have one sign come back as their weighted mean, both inside
the bounds; a bin whose images' gradients have opposite signs (an extrapolation), or one whose difference is
dominated by a defense's noise or the aggregate's rounding (a ratio of perturbations), lands far outside.
Plausible candidates go first, those with the largest bias difference first: a bin's read-out error is the
perturbation of its weight difference divided by its bias difference, so larger ones are read more exactly.
When fewer are plausible than there are images, some bins hold several: the plausible read-outs with the
largest bias differences (those most likely to hold several images) are repeated, since the blend is the
attacker's best guess for each of a bin's images, and every true image is then scored against something
(a blank filler would also pull the minimum-MSE pairing away from exact pairs, for dark images). Only when
no candidate is plausible (e.g. under additive noise) are the least implausible returned. Without
``input_bounds`` every candidate counts as plausible.

Labels (Robbing the Fed reads none): the update's label multiset, recovered from the output layer's update
(``adversary.inversion.labels``; exact behind the server's weights, whose logits do not depend on the input),
laid on the reconstructions so that those of bins with a negative bias difference take the class-0 labels: a
sample's gradient at the bins is p_0 - [y = 0], negative for class 0 alone. Which reconstruction carries which
of the other labels is a guess.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import ClassVar, Literal

import torch
from pydantic import Field

from adversary.inversion.labels import recover_labels
from adversary.inversion.options import AttackOptions
from adversary.inversion.requirements import AttackSetting
from adversary.registry import ATTACKS
from adversary.view import AttackerView, Reconstruction

IMPRINT = "imprint"


class RtfOptions(AttackOptions):
    name: Literal["rtf"] = Field("rtf", description="Robbing the Fed (Fowl et al. 2022): closed-form read-out")
    threat_model: ClassVar[str] = "malicious"
    requires: ClassVar[str] = "adversary.server: malicious with modification imprint"
    threshold: float = Field(
        1e-3, gt=0, lt=1, description="a bin is populated when its bias difference exceeds this share of the largest"
    )
    box_tolerance: float = Field(
        0.01,
        ge=0,
        description="a bin's read-out is plausible when its RMS excursion outside the valid input range is at most "
        "this share of the range's width",
    )

    def refusal(self, setting: AttackSetting) -> str | None:
        reason = super().refusal(setting)
        if reason is None and setting.modification != IMPRINT:
            reason = (
                "rtf reads the imprint block; "
                f"adversary.modification is {setting.modification or 'none'}, allowed: imprint"
            )
        return reason


def bin_differences(view: AttackerView) -> tuple[torch.Tensor, torch.Tensor]:
    """Adjacent rows' update differences in threshold order: (bins, D) weights and (bins,) biases, float64."""
    delta = view.parameter_delta()
    weight_key, bias_key = f"{IMPRINT}.weight", f"{IMPRINT}.bias"
    if weight_key not in delta or bias_key not in delta:
        raise ValueError(f"rtf: the view's model has no '{IMPRINT}' block; the round was not one the server modified")
    weight, bias = view.global_state[weight_key].double(), view.global_state[bias_key].double()
    order = torch.argsort(-bias / weight.norm(dim=1))  # thresholds t = -b / |w|, ascending
    dw, db = delta[weight_key].double()[order], delta[bias_key].double()[order]
    next_dw = torch.cat([dw[1:], torch.zeros_like(dw[:1])])
    next_db = torch.cat([db[1:], torch.zeros_like(db[:1])])
    return dw - next_dw, db - next_db


def read_out(view: AttackerView, threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Every populated bin's read-out, (K, C, H, W) float64 in the model's input space in bin order, and its
    bias difference (K,)."""
    dw, db = bin_differences(view)
    populated = torch.nonzero(
        db.abs() > threshold * db.abs().max().clamp(min=torch.finfo(torch.float64).tiny)
    ).flatten()
    return (dw[populated] / db[populated, None]).reshape(-1, *view.input_shape), db[populated]


def excursion(images: torch.Tensor, bounds: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """(K,) RMS distance of each image from the box ``bounds`` (per channel), in units of the box's width; zeros
    without bounds."""
    if bounds is None:
        return torch.zeros(len(images), dtype=torch.float64)
    low, high = (b.detach().cpu().double().reshape(1, -1, 1, 1) for b in bounds)
    outside = (images - images.clamp(min=low, max=high)) / (high - low)
    return outside.flatten(1).pow(2).mean(dim=1).sqrt()


def choose(
    images: torch.Tensor,
    bias_differences: torch.Tensor,
    count: int,
    bounds: tuple[torch.Tensor, torch.Tensor] | None,
    tolerance: float,
) -> tuple[torch.Tensor, int]:
    """The indices of ``count`` candidate read-outs of ``images`` chosen by the attacker's criterion (module
    docstring; none without candidates), and how many candidates were plausible."""
    if count <= 0 or len(images) == 0:
        return torch.zeros(0, dtype=torch.long), 0
    distance = excursion(images, bounds)
    plausible = torch.nonzero(distance <= tolerance).flatten()
    if len(plausible):  # largest bias difference first: the most exact read-outs, and the fullest bins to repeat
        ranked = plausible[torch.argsort(bias_differences[plausible].abs(), descending=True, stable=True)]
    else:  # nothing reads as an image: the least implausible
        ranked = torch.argsort(distance, stable=True)
    return ranked.repeat(count // len(ranked) + 1)[:count], len(plausible)


def laid_labels(view: AttackerView, bin_signs: torch.Tensor) -> torch.Tensor:
    """The update's label multiset, one label per reconstruction: class 0 first to those of bins with a negative
    bias difference (``bin_signs``; empty for blank guesses), the other labels in class order to the rest."""
    multiset = recover_labels(view).tolist()
    zeros, others = [c for c in multiset if c == 0], [c for c in multiset if c != 0]
    labels = []
    for negative in (bin_signs < 0).tolist() if len(bin_signs) else [False] * view.num_samples:
        first, second = (zeros, others) if negative else (others, zeros)
        labels.append((first or second).pop(0))
    return torch.tensor(labels, dtype=torch.int64)


def attack(views: Sequence[AttackerView], options: RtfOptions, seed: int, device: torch.device) -> list[Reconstruction]:
    results = []
    for view in views:
        start = time.perf_counter()
        candidates, bias_differences = read_out(view, options.threshold)
        picked, plausible = choose(
            candidates, bias_differences, view.num_samples, view.input_bounds, options.box_tolerance
        )
        images = candidates[picked].float()
        if len(images) == 0:  # nothing populated (e.g. the block was refused everywhere): blank guesses
            images = torch.zeros(view.num_samples, *view.input_shape)
        # the objective: images without a plausible bin (0 when every image may sit alone in a bin)
        missing = max(view.num_samples - plausible, 0)
        results.append(
            Reconstruction(
                images=images,
                labels=laid_labels(view, bias_differences[picked]),
                objective=float(missing),
                restart_objectives=(),
                iterations=0,
                seconds=time.perf_counter() - start,
            )
        )
    return results


ATTACKS.register(
    "rtf",
    help="Robbing the Fed (Fowl et al. 2022): images alone in an imprint bin, in closed form; "
    "needs adversary.server: malicious",
    config=RtfOptions,
)(attack)
