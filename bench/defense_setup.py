"""The defense table's set-up: the data split, the public model the federation starts from, and the settings.

MNIST's 10,000 arrays (``mnist_test.npz``) are split once, by a fixed seed, into a public set (``PUBLIC_IMAGES``),
the clients' training images and a held-out test set (``TEST_IMAGES``). The public set is what the server may know
before the federation starts: ``PRETRAIN_IMAGES`` of it pre-train ``lenet-fc`` (``pretrain``), the rest
(``TUNING_IMAGES``) is the validation set on which DP-SGD's clipping norm and learning rate are tuned
(``bench.dpsgd_tuning``). The pre-training is deliberately short (``PRETRAIN``): the public model starts at about
82 % so that the federation gains more than 10 points and the 1 / 3 / 10-point budgets separate a defense that works
from one that stops training.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from bench.common import CONFIGS
from fedsim.config import parse_config
from fedsim.models import build_model

CONFIG = CONFIGS / "defense-evaluation.yaml"
PUBLIC_IMAGES = 2000  # what the server may know before the federation starts
TUNING_IMAGES = 500  # of the public set: held out of pre-training, DP-SGD's tuning validation set
PRETRAIN_IMAGES = PUBLIC_IMAGES - TUNING_IMAGES
TEST_IMAGES = 2000  # held out for test accuracy; the clients hold the rest
SPLIT_SEED = 0
#: central SGD on the pre-training images, the step size cut by 0.3 at half and three quarters of the steps, each
#: batch shifted by up to ``PRETRAIN_SHIFT`` pixels; 80 steps leave the public model near 82 % on the test set
PRETRAIN = {"steps": 80, "batch_size": 64, "lr": 0.3}
PRETRAIN_SHIFT = 2
SOTERIA_LAYER = "representation"  # lenet-fc's fully connected representation layer, not its classifier

#: defense -> strength -> client.defenses; four strengths each, weakest first. DP-SGD's clipping norm (and the
#: client's learning rate) are tuned per epsilon by bench.dpsgd_tuning before the utility phase runs.
STRENGTHS: dict[str, dict[str, list[dict]]] = {
    "dpsgd": {f"epsilon {e:g}": [{"name": "dpsgd", "target_epsilon": e}] for e in (1, 8, 50, 1000)},
    "noise": {f"sigma {s:g}": [{"name": "noise", "sigma": s}] for s in (0.003, 0.01, 0.03, 0.1)},
    "prune": {f"ratio {r:g}": [{"name": "prune", "ratio": r}] for r in (0.5, 0.9, 0.99, 0.999)},
    "clip": {f"max_norm {n:g}": [{"name": "clip", "max_norm": n}] for n in (1.0, 0.1, 0.03, 0.01)},
    "gradient_dropout": {
        f"p {p:g}, sigma {s:g}": [{"name": "gradient_dropout", "p": p, "sigma": s}]
        for p, s in ((0.8, 5e-3), (0.6, 5e-3), (0.4, 5e-3), (0.6, 5e-2))
    },
    # kappa = (lr sigma)^2: at the utility phase's lr of 0.5, sigma 1 already leaves the model at chance
    "pdpsgd": {f"sigma {s:g}": [{"name": "pdpsgd", "sigma": s}] for s in (0.003, 0.01, 0.03, 0.1)},
    "soteria": {
        f"ratio {r:g} of `{SOTERIA_LAYER}`": [{"name": "soteria", "ratio": r, "layer": SOTERIA_LAYER}]
        for r in (0.2, 0.5, 0.8, 0.95)
    },
}
#: label -> client.defenses: the undefended run and every defense at every strength
DEFENSES: dict[str, list[dict]] = {
    "none": [],
    **{f"{defense} {label}": settings for defense, levels in STRENGTHS.items() for label, settings in levels.items()},
}
#: defenses the utility phase leaves out, and why: they have no sent models beyond the public one (round 1)
UTILITY_SKIPPED: dict[str, str] = {
    "soteria": "its score needs each sample's Jacobian for each of the representation layer's 588 input units, "
    "about 20 s per round of 10 clients x 64 images on 2 CPU cores, so hours per run",
}
#: the utility phase's settings: DEFENSES without UTILITY_SKIPPED
UTILITY_DEFENSES: dict[str, list[dict]] = {
    label: settings for label, settings in DEFENSES.items() if not any(d["name"] in UTILITY_SKIPPED for d in settings)
}
#: the settings of papers 000, 001 and 004 (configs/papers/) that DEFENSES lacks, run into the same sweeps by
#: bench.paper_results
PAPER_EXTRAS: dict[str, list[dict]] = {
    "clip-0.5": [{"name": "clip", "max_norm": 0.5}],
    "pdpsgd-1": [{"name": "pdpsgd", "sigma": 1.0}],
}


def settings_key(defenses: list) -> str:
    """A defense list as a comparable string (validated, so that defaults are filled alike)."""
    parsed = parse_config({"client": {"defenses": defenses}}).client.defenses
    return repr([d.model_dump() for d in parsed])


def defense_of(label: str) -> tuple[str, str]:
    """(defense, strength) of a ``DEFENSES`` label."""
    for defense, levels in STRENGTHS.items():
        for strength in levels:
            if label == f"{defense} {strength}":
                return defense, strength
    return label, "-"


def images_of(x: np.ndarray) -> torch.Tensor:
    """(N, H, W) or (N, C, H, W) uint8 or [0, 1] arrays as float (N, C, H, W) in [0, 1], as fedsim loads them."""
    images = torch.as_tensor(np.asarray(x), dtype=torch.float32)
    images = images[:, None] if images.dim() == 3 else images
    return images / 255 if np.asarray(x).dtype == np.uint8 else images


def split_data(source: Path, out: Path) -> tuple[Path, Path]:
    """``source``'s x, y split once into a public set and the federation's training and test arrays."""
    public, federated = out / "public.npz", out / "federated.npz"
    if public.is_file() and federated.is_file():
        return federated, public
    arrays = np.load(source)
    x, y = arrays["x"], arrays["y"]
    order = np.random.default_rng(SPLIT_SEED).permutation(len(y))
    test, shared, private = (
        order[:TEST_IMAGES],
        order[TEST_IMAGES : TEST_IMAGES + PUBLIC_IMAGES],
        order[TEST_IMAGES + PUBLIC_IMAGES :],
    )
    out.mkdir(parents=True, exist_ok=True)
    np.savez(public, x=x[shared], y=y[shared])
    np.savez(federated, x_train=x[private], y_train=y[private], x_test=x[test], y_test=y[test])
    return federated, public


def public_arrays(public: Path, part: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The public set's pre-training (``part="pretrain"``) or tuning (``"tuning"``) images and labels."""
    arrays = np.load(public)
    rows = slice(0, PRETRAIN_IMAGES) if part == "pretrain" else slice(PRETRAIN_IMAGES, PUBLIC_IMAGES)
    return images_of(arrays["x"][rows]), torch.as_tensor(arrays["y"][rows]).long()


def build_lenet_fc(model: dict) -> torch.nn.Module:
    """``model`` (the config's model section) as the network the federation trains, at its seeded initialisation."""
    return build_model(
        parse_config({"model": model}).model, in_channels=1, num_classes=10, image_size=28, seed=SPLIT_SEED
    )


def pretrain(public: Path, federated: Path, model: dict, out: Path) -> Path:
    """Train ``model`` centrally on the public pre-training images and save its state_dict (once: an existing file
    is kept)."""
    path = out / "pretrained.pt"
    if path.is_file():
        return path
    network = build_lenet_fc(model)
    x, y = public_arrays(public, "pretrain")
    generator = torch.Generator().manual_seed(SPLIT_SEED)
    steps = PRETRAIN["steps"]
    optimizer = torch.optim.SGD(network.parameters(), lr=PRETRAIN["lr"])
    schedule = torch.optim.lr_scheduler.MultiStepLR(optimizer, [steps // 2, 3 * steps // 4], gamma=0.3)
    network.train()
    for _ in range(steps):
        batch = torch.randint(len(y), (PRETRAIN["batch_size"],), generator=generator)
        shift = torch.randint(-PRETRAIN_SHIFT, PRETRAIN_SHIFT + 1, (2,), generator=generator).tolist()
        loss = torch.nn.functional.cross_entropy(network(torch.roll(x[batch], shift, dims=(2, 3))), y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    held_out = np.load(federated)
    network.eval()
    with torch.no_grad():
        predicted = network(images_of(held_out["x_test"])).argmax(dim=1)
    accuracy = float((predicted == torch.as_tensor(held_out["y_test"])).float().mean())
    print(f"pre-trained lenet-fc on {len(y)} public images: test accuracy {100 * accuracy:.2f} %")
    torch.save(network.state_dict(), path)
    return path
