"""When test accuracy stops improving: the stopping criterion of ``federation.plateau``; imports nothing of
the project.

The criterion is Keras' ``EarlyStopping`` on test accuracy: an evaluation improves when it beats the best
accuracy so far by more than ``min_delta``; the plateau is reached at the evaluation that ends ``patience``
evaluations in a row without an improvement. The accuracy at the plateau is the mean of those ``patience``
evaluations: the level training settled at. (The best accuracy by then would credit a defense that only
degrades a pre-trained model with the accuracy it started from.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Plateau:
    index: int  # the evaluation at which the criterion first held
    best_index: int  # the evaluation of the best accuracy by then (the last improvement)
    best_accuracy: float
    accuracy: float  # the mean of the ``patience`` evaluations without an improvement that ended at ``index``


def plateau_of(accuracies: Sequence[float], patience: int, min_delta: float, not_before: int = 0) -> Plateau | None:
    """The first plateau in ``accuracies`` (one per evaluation, in order) at evaluation ``not_before`` or later, or
    None when there is none (an earlier lull that improvement ended does not count)."""
    if patience < 1 or min_delta < 0:
        raise ValueError(f"patience = {patience}, min_delta = {min_delta}: need patience >= 1 and min_delta >= 0")
    best_index, best, waited = 0, None, 0
    for index, accuracy in enumerate(accuracies):
        if best is None or accuracy > best + min_delta:
            best_index, best, waited = index, accuracy, 0
            continue
        waited += 1
        if waited >= patience and index >= not_before:
            window = accuracies[index - patience + 1 : index + 1]
            return Plateau(index, best_index, float(best), float(sum(window) / len(window)))
    return None


def first_reaching(accuracies: Sequence[float], target: float) -> int | None:
    """The index of the first evaluation whose accuracy is at least ``target``, or None if none is."""
    return next((index for index, accuracy in enumerate(accuracies) if accuracy >= target), None)
