"""Scores of a text reconstruction against the true batch, outside the attack.

Recovered and true sequences are token ids of the model's tokenizer, padding dropped. They are paired one to
one by the Hungarian method on ROUGE-L (the pairing that maximises the summed ROUGE-L F1), and per pair:

- ``exact``: 1 when the recovered sequence is the true one token for token;
- ``token_accuracy``: tokens equal at the same position, over the true sequence's tokens (summed over pairs);
- ``rouge1`` / ``rouge2`` / ``rougeL``: ROUGE F1 (``rouge-score``) over the tokens (for a word-level tokenizer
  the words; for a subword one its subwords, so scores do not depend on how a tokenizer joins them into text).

Each is the mean over the true sequences (an unpaired one, when fewer were recovered, scores 0).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

TEXT_METRICS = ("exact", "token_accuracy", "rouge1", "rouge2", "rougeL")


class _TokenIds:
    """rouge-score's tokenizer interface over space-joined token ids: the ids are the tokens."""

    def tokenize(self, text: str) -> list[str]:
        return text.split()


def _scorer():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], tokenizer=_TokenIds())


def without_padding(ids: np.ndarray, pad_id: int) -> list[list[int]]:
    """(N, L) right-padded ids -> the sequences, padding dropped."""
    return [[int(token) for token in row if token != pad_id] for row in np.asarray(ids)]


def pair_scores(recovered: list[int], truth: list[int], scorer=None) -> dict[str, float]:
    """Every metric of one recovered sequence against one true sequence."""
    scores = (scorer or _scorer()).score(" ".join(map(str, truth)), " ".join(map(str, recovered)))
    same = sum(a == b for a, b in zip(recovered, truth))
    return {
        "exact": float(recovered == truth),
        "token_accuracy": same / max(1, len(truth)),
        **{name: float(scores[name].fmeasure) for name in ("rouge1", "rouge2", "rougeL")},
    }


def score_text(recovered: Sequence[list[int]], truth: Sequence[list[int]], scorer=None) -> dict[str, float]:
    """Mean of each metric over the true sequences, paired one to one with the recovered ones on ROUGE-L."""
    scorer = scorer or _scorer()
    table = [[pair_scores(guess, true, scorer) for guess in recovered] for true in truth]
    rows, columns = _assignment(table, len(truth), len(recovered))
    lengths = np.array([len(true) for true in truth], dtype=float)
    totals = dict.fromkeys(TEXT_METRICS, 0.0)
    for row, column in zip(rows, columns):
        for metric in TEXT_METRICS:
            weight = lengths[row] if metric == "token_accuracy" else 1.0
            totals[metric] += table[row][column][metric] * weight
    count = max(1, len(truth))
    scores = {metric: totals[metric] / count for metric in TEXT_METRICS}
    scores["token_accuracy"] = totals["token_accuracy"] / max(1.0, lengths.sum())
    return scores


def _assignment(table: list[list[dict[str, float]]], truths: int, guesses: int) -> tuple[np.ndarray, np.ndarray]:
    from scipy.optimize import linear_sum_assignment

    gain = np.array([[cell["rougeL"] for cell in row] for row in table]).reshape(truths, guesses)
    return linear_sum_assignment(gain, maximize=True)


def pairing(recovered: Sequence[list[int]], truth: Sequence[list[int]], scorer=None) -> list[int | None]:
    """For each true sequence, the index of the recovered one ``score_text`` pairs it with (None: unpaired)."""
    scorer = scorer or _scorer()
    table = [[pair_scores(guess, true, scorer) for guess in recovered] for true in truth]
    rows, columns = _assignment(table, len(truth), len(recovered))
    paired: list[int | None] = [None] * len(truth)
    for row, column in zip(rows, columns):
        paired[int(row)] = int(column)
    return paired
