"""Classification metrics of a model on a labelled set (server-side and client-side evaluation)."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.metrics import confusion_matrix, matthews_corrcoef, precision_recall_fscore_support
from torch import nn


@torch.no_grad()
def predict(model: nn.Module, x: torch.Tensor, batch_size: int = 512) -> torch.Tensor:
    """Logits for ``x`` in eval mode, in batches (the whole test set may not fit at once)."""
    model.eval()
    device = next(model.parameters()).device
    return torch.cat([model(x[i : i + batch_size].to(device)).float().cpu() for i in range(0, len(x), batch_size)])


def classification_metrics(logits: torch.Tensor, labels: torch.Tensor, num_classes: int) -> dict[str, float]:
    """Loss, accuracy and macro precision, recall, specificity, F1 and MCC (as in paper 000)."""
    loss = float(nn.functional.cross_entropy(logits, labels))
    y_true = labels.numpy()
    y_pred = logits.argmax(dim=1).numpy()
    classes = np.arange(num_classes)
    precision, recall, f1, _ = precision_recall_fscore_support(
        y_true, y_pred, labels=classes, average="macro", zero_division=0
    )
    cm = confusion_matrix(y_true, y_pred, labels=classes)
    true_pos = np.diag(cm)
    false_pos = cm.sum(axis=0) - true_pos
    false_neg = cm.sum(axis=1) - true_pos
    true_neg = cm.sum() - true_pos - false_pos - false_neg
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
