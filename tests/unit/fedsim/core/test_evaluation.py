"""Classification metrics: the same numbers as scikit-learn's, in memory linear in the number of classes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import confusion_matrix

from fedsim.core.evaluation import classification_metrics


def test_specificity_is_the_confusion_matrix_one():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(200, 7, generator=generator)
    labels = torch.randint(0, 7, (200,), generator=generator)
    cm = confusion_matrix(labels.numpy(), logits.argmax(1).numpy(), labels=np.arange(7))
    true_pos = np.diag(cm)
    false_pos, false_neg = cm.sum(0) - true_pos, cm.sum(1) - true_pos
    true_neg = cm.sum() - true_pos - false_pos - false_neg
    expected = np.where(true_neg + false_pos > 0, true_neg / (true_neg + false_pos), 0.0).mean()
    metrics = classification_metrics(logits, labels, num_classes=7)
    assert metrics["specificity"] == pytest.approx(expected, rel=1e-12)
    assert metrics["accuracy"] == pytest.approx(float((logits.argmax(1) == labels).float().mean()))


def test_a_label_space_of_100000_classes_needs_no_square_matrix():
    """Labels up to 99,999 (under the data sets' cap): a dense confusion matrix would take 74.5 GiB."""
    logits = torch.zeros(4, 100_000)
    logits[torch.arange(4), torch.tensor([0, 5, 99_999, 7])] = 1.0
    metrics = classification_metrics(logits, torch.tensor([0, 5, 99_999, 3]), num_classes=100_000)
    assert metrics["accuracy"] == 0.75
    assert 0.0 <= metrics["specificity"] <= 1.0


def test_next_token_targets_are_scored_token_by_token_without_the_padding():
    logits = torch.zeros(2, 5, 3)  # (sequences, vocabulary, positions)
    logits[0, 4, 0] = logits[0, 2, 1] = logits[1, 1, 0] = 9.0  # predicts 4, 2, - and 1, -, -
    labels = torch.tensor([[4, 3, -100], [1, -100, -100]])

    metrics = classification_metrics(logits, labels, num_classes=5)

    assert metrics["accuracy"] == pytest.approx(2 / 3)  # 3 real targets, 2 predicted
    flat = classification_metrics(
        torch.stack([logits[0, :, 0], logits[0, :, 1], logits[1, :, 0]]), torch.tensor([4, 3, 1]), 5
    )
    assert metrics == pytest.approx(flat)
