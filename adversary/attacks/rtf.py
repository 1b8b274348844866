"""``rtf``: Robbing the Fed (Fowl, Geiping, Czaja, Goldblum & Goldstein, ICLR 2022), the closed-form read-out.

Needs a malicious server that sent the ``imprint`` modification (``adversary.modifications.imprint``): the
view's model is the imprinted one and its global state the block the server chose. Every row of the block
measures the same direction; sorting the rows by threshold, rows k and k+1 differ only by the samples whose
measurement falls between their thresholds, so with delta = w_t - w_(t+1) (any learning rate, any FedAvg or
SecAgg+ weighting: both parts of a row scale alike)

    x = (dW_k - dW_(k+1)) / (db_k - db_(k+1))

is exactly the image when one image alone fell into bin k, and a weighted mean of the images when several
did. Bins whose bias difference is below ``threshold`` times the largest are empty (their ratio would be
noise). One reconstruction per populated bin, in bin order. When fewer bins are populated than the
attacker's ``num_samples``, some bins hold several images; the missing ones are filled with the read-outs
of the bins with the largest bias differences (those most likely to hold several images), repeated: the
blend is the attacker's best guess for each of a bin's images, and every true image is scored against
something rather than left out (a blank filler would also pull the minimum-MSE pairing away from exact
pairs, for dark images).
Labels: the imprinted model's prediction on each reconstruction at the round's weights (Robbing the Fed
reads no labels; label accuracy of rtf is that guess).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch.func import functional_call

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


def read_out(view: AttackerView, threshold: float, count: int = 0) -> torch.Tensor:
    """The images of the populated bins, (K, C, H, W) in the model's input space, float32; at least ``count``
    of them (the bins with the largest bias differences repeated)."""
    dw, db = bin_differences(view)
    populated = torch.nonzero(
        db.abs() > threshold * db.abs().max().clamp(min=torch.finfo(torch.float64).tiny)
    ).flatten()
    images = dw[populated] / db[populated, None]
    if 0 < len(images) < count:
        fullest = torch.argsort(db[populated].abs(), descending=True)
        images = torch.cat([images, images[fullest.repeat(count // len(images) + 1)[: count - len(images)]]])
    return images.reshape(-1, *view.input_shape).float()


def attack(views: Sequence[AttackerView], options: RtfOptions, seed: int, device: torch.device) -> list[Reconstruction]:
    results = []
    for view in views:
        start = time.perf_counter()
        populated = len(read_out(view, options.threshold))
        images = read_out(view, options.threshold, view.num_samples)
        if len(images) == 0:  # nothing populated (e.g. the block was refused everywhere): blank guesses
            images = torch.zeros(view.num_samples, *view.input_shape)
        # the objective: images beyond the populated bins (0 when every image may sit alone in a bin)
        missing = max(view.num_samples - populated, 0)
        with torch.no_grad():
            state = {k: v.float() for k, v in view.global_state.items()}
            labels = functional_call(copy.deepcopy(view.model).float().eval(), state, (images,)).argmax(dim=1)
        results.append(
            Reconstruction(
                images=images,
                labels=labels.to(torch.int64),
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
