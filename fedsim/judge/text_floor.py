"""The null under a text leakage score: public sentences and label-informed guesses through the same pairing.

A failed text attack does not score zero either: any public sentence shares words ("the", "of") with a private
one, and earns ROUGE-1. As for images (``fedsim.judge.floor``), a score means leakage only where no guess made
*without* the update could have reached it. Families, each scored against the target exactly as a
reconstruction is (``fedsim.judge.text_scoring.score_text``: same Hungarian pairing on ROUGE-L, same metrics,
as many sequences as the reconstruction holds):

- ``public-mode``: per position, the public split's most frequent token, as long as its median sequence,
  repeated (fixed: one score);
- ``random-public``: that many sequences drawn at random from the public split;
- ``label-public`` (classification only): per sequence, a random public sequence of that sequence's class
  (reads the true labels: a null at least as strong as any label recovery).

The public split is the data set's test split (no client trains on it). p-values, critical values and the
verdict follow ``fedsim.judge.floor`` exactly (Monte-Carlo p-value per random family, the largest over families,
``leaks`` at or below the level); the verdict is read on ROUGE-L, the floor of every metric is reported beside it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedsim.judge.floor import AT_FLOOR, FLOOR_DRAWS, FLOOR_LEVEL, LEAKS, TIE, significant
from fedsim.judge.text_scoring import TEXT_METRICS, _scorer, score_text, without_padding

VERDICT_METRIC = "rougeL"


@dataclass(frozen=True)
class TextGuessScores:
    """One guess family's scores per draw (one row for a fixed guess): metric -> (draws,) array."""

    name: str
    scores: dict[str, np.ndarray]

    @property
    def fixed(self) -> bool:
        return len(self.scores[VERDICT_METRIC]) == 1

    def p_value(self, score: float, metric: str = VERDICT_METRIC) -> float:
        reached = int(np.count_nonzero(self.scores[metric] >= score - TIE))
        return float(reached > 0) if self.fixed else (1 + reached) / (1 + len(self.scores[metric]))

    def critical(self, metric: str = VERDICT_METRIC, level: float = FLOOR_LEVEL) -> float:
        values = np.sort(self.scores[metric])[::-1]
        if self.fixed:
            return float(values[0]) + TIE
        allowed = math.floor(level * (1 + len(values)) - 1 + 1e-9)
        return float(values[allowed]) + TIE if allowed >= 0 else math.inf


@dataclass(frozen=True)
class TextFloor:
    families: tuple[TextGuessScores, ...]
    level: float = FLOOR_LEVEL

    def p_value(self, score: float, metric: str = VERDICT_METRIC) -> float:
        return max(family.p_value(score, metric) for family in self.families)

    def value(self, metric: str = VERDICT_METRIC) -> float:
        return max(family.critical(metric, self.level) for family in self.families)

    def verdict(self, score: float) -> str:
        return LEAKS if significant(self.p_value(score), self.level) else AT_FLOOR

    def to_row(self, scores: dict[str, float]) -> dict[str, object]:
        """The floor's fields of a text attack row whose reconstruction scored ``scores``."""
        row: dict[str, object] = {}
        for metric in TEXT_METRICS:
            value = self.value(metric)
            row[f"floor_{metric}"] = value if math.isfinite(value) else None
        row["floor_source"] = max(self.families, key=lambda family: family.critical(VERDICT_METRIC, self.level)).name
        row["floor_draws"] = max(len(family.scores[VERDICT_METRIC]) for family in self.families)
        row["floor_level"] = self.level
        row["p_value"] = self.p_value(scores[VERDICT_METRIC])
        row["verdict"] = self.verdict(scores[VERDICT_METRIC])
        return row


def _family(name: str, guesses: list[list[list[int]]], truth: Sequence[list[int]]) -> TextGuessScores:
    scorer = _scorer()
    scored = [score_text(guess, truth, scorer) for guess in guesses]
    return TextGuessScores(name, {metric: np.array([s[metric] for s in scored]) for metric in TEXT_METRICS})


def public_mode(public: Sequence[list[int]]) -> list[int]:
    """Per position, the most frequent public token (ties: the smallest id), over the median public length."""
    length = int(np.median([len(sequence) for sequence in public]))
    mode = []
    for position in range(length):
        counts = Counter(sequence[position] for sequence in public if len(sequence) > position)
        mode.append(min(counts, key=lambda token: (-counts[token], token)))
    return mode


def text_floor(
    truth: Sequence[list[int]],
    public: Sequence[list[int]],
    count: int,
    rng: np.random.Generator,
    draws: int = FLOOR_DRAWS,
    truth_labels: Sequence[int] | None = None,
    public_labels: Sequence[int] | None = None,
    level: float = FLOOR_LEVEL,
) -> TextFloor:
    """The floor of a target ``truth`` for a reconstruction of ``count`` sequences, from the public split."""
    if not public:
        raise ValueError("text_floor: the public split holds no sequence to guess with")
    families = [_family("public-mode", [[public_mode(public)] * count], truth)]
    picks = [rng.integers(0, len(public), size=count) for _ in range(draws)]
    families.append(_family("random-public", [[public[i] for i in pick] for pick in picks], truth))
    if truth_labels is not None and public_labels is not None:
        by_class = {label: [i for i, own in enumerate(public_labels) if own == label] for label in set(public_labels)}
        guesses = []
        for _ in range(draws):
            guess = [public[int(rng.choice(by_class[label]))] if by_class.get(label) else [] for label in truth_labels]
            guesses.append((guess * (count // max(1, len(guess)) + 1))[:count])
        families.append(_family("label-public", guesses, truth))
    return TextFloor(tuple(families), level)


def text_row(
    recovered: np.ndarray,
    truth: np.ndarray,
    public: np.ndarray,
    pad_id: int,
    rng: np.random.Generator,
    draws: int = FLOOR_DRAWS,
    truth_labels: Sequence[int] | None = None,
    public_labels: Sequence[int] | None = None,
    level: float = FLOOR_LEVEL,
) -> dict[str, object]:
    """A text attack row: the scores of ``recovered`` (N, L) ids against ``truth``, with the floor and verdict."""

    truth_sequences = without_padding(truth, pad_id)
    recovered_sequences = without_padding(recovered, pad_id)
    scores = score_text(recovered_sequences, truth_sequences)
    floor = text_floor(
        truth_sequences,
        without_padding(public, pad_id),
        len(recovered_sequences),
        rng,
        draws,
        truth_labels,
        public_labels,
        level,
    )
    return {**{f"{metric}_mean": value for metric, value in scores.items()}, **floor.to_row(scores)}
