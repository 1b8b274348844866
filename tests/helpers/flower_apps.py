"""The example Flower app and its audit config, with data made here: CIFAR-like 32x32 images in a parquet file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from repository import REPO_ROOT

QUICKSTART_APP = REPO_ROOT / "configs" / "flower-apps" / "quickstart-pytorch"
QUICKSTART_AUDIT = REPO_ROOT / "configs" / "flower-apps" / "quickstart-pytorch-audit.yaml"
OPACUS_APP = REPO_ROOT / "configs" / "flower-apps" / "opacus-pytorch"
OPACUS_AUDIT = REPO_ROOT / "configs" / "flower-apps" / "opacus-pytorch-audit.yaml"
LOCAL_DP_APP = REPO_ROOT / "configs" / "flower-apps" / "localdp-pytorch"
LOCAL_DP_AUDIT = REPO_ROOT / "configs" / "flower-apps" / "localdp-pytorch-audit.yaml"


def cifar_like_images(count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``count`` (32, 32, 3) uint8 images: scikit-learn digits scaled up, each channel tinted differently."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(digits.images), count, replace=False)
    images = []
    for pick in picks:
        ink = np.kron(digits.images[pick] / 16.0, np.ones((4, 4)))  # 8x8 -> 32x32
        tint = rng.uniform(0.3, 1.0, 3)
        images.append((255 * ink[..., None] * tint).round().astype(np.uint8))
    return np.stack(images), digits.target[picks].astype(np.int64)


def write_image_parquet(path: Path, count: int, seed: int = 0) -> Path:
    """A parquet file as Flower Datasets reads CIFAR-10: an ``img`` Image column and a ``label`` ClassLabel."""
    import datasets
    from PIL import Image

    images, labels = cifar_like_images(count, seed)
    features = datasets.Features(
        {"img": datasets.Image(), "label": datasets.ClassLabel(names=[str(c) for c in range(10)])}
    )
    table = datasets.Dataset.from_dict(
        {"img": [Image.fromarray(image) for image in images], "label": labels.tolist()}, features=features
    )
    table.to_parquet(str(path))
    return path
