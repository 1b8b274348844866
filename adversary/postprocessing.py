"""The attacker's last step on its own output: the gradient-match yardstick, and cleaning where it helps.

Every reconstruction leaves the attacker with its ``gradient_match`` (1 - cosine between the update the
reconstruction would produce and the observed one): the attacker-side criterion that picks the result it reports
among several attacks (``fedsim.judge.verdict``). An attacker may also clean its output without the truth: each
filter of ``POSTPROCESSING`` is tried, and kept where it lowers the gradient match. Whatever was kept is named on
the result (``Reconstruction.postprocess``), and the scoring side puts the null's guesses through the same filter,
so the test compares like with like.

The filters are per-channel order statistics, which commute with the per-channel affine normalisation between the
model's input space and [0, 1] images and with clamping: cleaning in either space gives the same image.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from adversary.view import AttackerView, Reconstruction


def median_filter(images: torch.Tensor, size: int = 3) -> torch.Tensor:
    """Per-channel median over a ``size`` x ``size`` window, edges reflected; (N, C, H, W) in, same shape out."""
    pad = size // 2
    padded = F.pad(images, (pad, pad, pad, pad), mode="reflect" if min(images.shape[-2:]) > pad else "replicate")
    windows = padded.unfold(2, size, 1).unfold(3, size, 1)  # (N, C, H, W, size, size)
    return windows.reshape(*images.shape, size * size).median(dim=-1).values


#: the cleanings an attacker tries on its output, by the name rows record
POSTPROCESSING: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"median3": median_filter}


def _matches(views: Sequence[AttackerView], recs: Sequence[Reconstruction], device: torch.device) -> list[float | None]:
    """Per view, the gradient match of its reconstruction (None where the yardstick cannot simulate the view)."""
    from adversary.inversion.problem import group_views
    from adversary.inversion.saturation import gradient_match

    found: list[float | None] = [None] * len(views)
    for group in group_views(views):
        with contextlib.suppress(Exception):  # e.g. more candidates than samples: the yardstick does not apply
            matched = gradient_match([views[i] for i in group], [recs[i] for i in group], device)
            for index, match in zip(group, matched, strict=True):
                found[index] = match if math.isfinite(match) else None
    return found


def finish(views: Sequence[AttackerView], recs: Sequence[Reconstruction], device: torch.device) -> list[Reconstruction]:
    """Each reconstruction with its gradient match (a portfolio's ranking measured it already, the same way, for
    the results it ranked; the others are measured here), and, where a filter of ``POSTPROCESSING`` lowers that
    match, the filtered images, named in ``postprocess``."""
    missing = [i for i, rec in enumerate(recs) if rec.gradient_match is None]
    measured = _matches([views[i] for i in missing], [recs[i] for i in missing], device) if missing else []
    raw = list(recs)
    for index, match in zip(missing, measured, strict=True):
        raw[index] = dataclasses.replace(raw[index], gradient_match=match)
    out = list(raw)
    for name, clean in POSTPROCESSING.items():  # each filter on the raw output; the lowest match is kept
        candidates = [i for i, rec in enumerate(raw) if rec.gradient_match is not None and rec.images.ndim == 4]
        cleaned = {i: dataclasses.replace(raw[i], images=clean(raw[i].images)) for i in candidates}
        matches = _matches([views[i] for i in candidates], [cleaned[i] for i in candidates], device)
        for index, match in zip(candidates, matches, strict=True):
            best = out[index].gradient_match
            if match is not None and best is not None and match < best:
                out[index] = dataclasses.replace(cleaned[index], gradient_match=match, postprocess=name)
    return out
