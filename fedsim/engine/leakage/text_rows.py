"""The scores of a text attack's sequences against the sequences a target trained on, with the floor and verdict.

Scoring side only (``fedsim.engine.leakage.scoring`` calls it): it reads the true token ids. The row carries the
shares recovered (``exact_mean``: sequences, ``token_accuracy_mean``: tokens), ROUGE-1/2/L, the text floor of
public sentences through the same pairing (``fedsim.judge.text_floor``), and each true text beside the recovered
text it was paired with, for the console table and the report.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedsim.data import TextDataset
from fedsim.judge.floor import UNKNOWN
from fedsim.judge.text_floor import text_row
from fedsim.judge.text_scoring import pairing, without_padding


def text_fields(
    tokens: np.ndarray, dataset: TextDataset, ids: np.ndarray, seed: int, draws: int, level: float
) -> dict[str, Any]:
    """Scores, floor, verdict and the paired texts of recovered ``tokens`` (N, L) against training samples ``ids``."""
    truth = dataset.x_train[ids]
    labelled = dataset.task == "classification"
    row: dict[str, Any] = {"modality": "text", "sequences": len(ids), "tokens": int((truth != dataset.pad_id).sum())}
    if len(dataset.x_test):
        row |= text_row(
            tokens,
            truth,
            dataset.x_test,
            dataset.pad_id,
            np.random.default_rng(seed),
            draws,
            dataset.y_train[ids].tolist() if labelled else None,
            dataset.y_test.tolist() if labelled else None,
            level,
        )
    else:  # no public split to guess from: the scores stand without a test
        from fedsim.judge.text_scoring import score_text

        scores = score_text(without_padding(tokens, dataset.pad_id), without_padding(truth, dataset.pad_id))
        row |= {**{f"{metric}_mean": value for metric, value in scores.items()}, "verdict": UNKNOWN}
    row["texts"] = paired_texts(tokens, truth, dataset)
    return row


def paired_texts(tokens: np.ndarray, truth: np.ndarray, dataset: TextDataset) -> list[dict[str, str]]:
    """Each true text beside the recovered text the scores paired it with ("" where none was)."""
    recovered = without_padding(tokens, dataset.pad_id)
    partner = pairing(recovered, without_padding(truth, dataset.pad_id))
    originals = dataset.decode(truth)
    return [
        {"original": original, "recovered": dataset.tokenizer.decode(recovered[index]) if index is not None else ""}
        for original, index in zip(originals, partner)
    ]
