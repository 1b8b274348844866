"""Classification metrics of a model on a labelled set (server-side and client-side evaluation)."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.metrics import matthews_corrcoef, precision_recall_fscore_support
from torch import nn

#: the target ``nn.CrossEntropyLoss`` skips by default (padding of token targets)
IGNORED_TARGET = -100


@torch.no_grad()
def predict(model: nn.Module, x: torch.Tensor, batch_size: int = 512) -> torch.Tensor:
    """Logits for ``x`` in eval mode, in batches (the whole test set may not fit at once)."""
    model.eval()
    device = next(model.parameters()).device
    return torch.cat([model(x[i : i + batch_size].to(device)).float().cpu() for i in range(0, len(x), batch_size)])


def classification_metrics(logits: torch.Tensor, labels: torch.Tensor, num_classes: int) -> dict[str, float]:
    """Loss, accuracy and macro precision, recall, specificity, F1 and MCC (as in paper 000).

    Per-token targets ((N, C, L) logits, (N, L) labels: next-token text) are scored token by token, leaving out
    the targets ``cross_entropy`` ignores (padding).
    """
    loss = float(nn.functional.cross_entropy(logits, labels, ignore_index=IGNORED_TARGET))
    if logits.ndim == 3:
        logits, labels = logits.transpose(1, 2).reshape(-1, logits.shape[1]), labels.reshape(-1)
        kept = labels != IGNORED_TARGET
        logits, labels = logits[kept], labels[kept]
    y_true = labels.numpy()
    y_pred = logits.argmax(dim=1).numpy()
    classes = np.arange(num_classes)
    precision, recall, f1, _ = precision_recall_fscore_support(
        y_true, y_pred, labels=classes, average="macro", zero_division=0
    )
    # per-class counts, never the num_classes x num_classes confusion matrix (a label id of 99,999 made that 74 GiB)
    true_pos = np.bincount(y_true[y_true == y_pred], minlength=num_classes)
    false_pos = np.bincount(y_pred, minlength=num_classes) - true_pos
    false_neg = np.bincount(y_true, minlength=num_classes) - true_pos
    true_neg = len(y_true) - true_pos - false_pos - false_neg
    with np.errstate(invalid="ignore", divide="ignore"):
        specificity = np.where(true_neg + false_pos > 0, true_neg / (true_neg + false_pos), 0.0)
    return {
        "loss": loss,
        "accuracy": float((y_pred == y_true).mean()),
        "precision": float(precision),
        "recall": float(recall),
        "specificity": float(specificity.mean()),
        "f1": float(f1),
        "mcc": float(matthews_corrcoef(y_true, y_pred)) if len(np.unique(y_true)) > 1 else 0.0,
    }


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, num_classes: int) -> dict[str, float]:
    return classification_metrics(predict(model, x), y, num_classes)
