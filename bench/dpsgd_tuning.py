"""DP-SGD's clipping norm and learning rate, tuned per epsilon on public data before the defense table runs.

A DP-SGD row is only as good as its hyper-parameters: with one clipping norm and the undefended learning rate for
every epsilon, a row measures a badly set mechanism rather than DP-SGD at that budget. So, per target epsilon,
optuna (TPE, seeded) searches the clipping norm C and the client's learning rate on public images only
(``bench.defense_setup``: the pre-training images train, the held-out public images validate), for the noise
multiplier that epsilon sets over the utility phase's rounds. Each trial replays the federation's mechanism in one
process: every round, each of the federation's clients draws a Poisson batch (expected ``batch_size`` images),
clips each image's gradient to C, adds N(0, (sigma C)^2) to the sum and divides by the expected batch size (what
Opacus' DPOptimizer does), and the server averages the clients' noisy gradients into one SGD step from the public
model. The per-image gradients of all clients are one ``torch.func`` vmap.

No private image is read: the tuning is part of the public protocol, done once per epsilon and cached in
``OUT/dpsgd-tuning.json``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.func import functional_call, grad, vmap

TRIALS = 10
CLIP_RANGE = (0.01, 10.0)
LR_RANGE = (0.05, 20.0)
TUNING_SEED = 0


@dataclass(frozen=True)
class Federation:
    """What a trial replays: the utility phase's clients, batch, rounds and the noise multiplier of an epsilon."""

    clients: int
    batch_size: int
    rounds: int
    noise_multiplier: float


@dataclass(frozen=True)
class Tuned:
    """The chosen clipping norm and learning rate, and the public validation accuracy they reached."""

    epsilon: float
    noise_multiplier: float
    max_grad_norm: float
    lr: float
    validation_accuracy: float


def train(
    model: torch.nn.Module,
    start: dict[str, torch.Tensor],
    data: tuple[torch.Tensor, torch.Tensor],
    federation: Federation,
    clip: float,
    lr: float,
    seed: int,
) -> dict[str, torch.Tensor]:
    """The parameters after ``federation.rounds`` rounds of federated DP-SGD on ``data`` (see the module's doc)."""
    x, y = data
    generator = torch.Generator().manual_seed(seed)
    params = {name: value.detach().clone() for name, value in start.items()}

    def loss_of_one(p: dict[str, torch.Tensor], image: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        logits = functional_call(model, p, (image[None],))
        return torch.nn.functional.cross_entropy(logits, label[None])

    per_image = vmap(grad(loss_of_one), in_dims=(None, 0, 0))
    rate = federation.batch_size / len(y)
    for _ in range(federation.rounds):
        # every client's Poisson batch at once: independent draws, so the union is one multiset of images
        picks = (torch.rand(federation.clients, len(y), generator=generator) < rate).nonzero()[:, 1]
        gradients = per_image(params, x[picks], y[picks]) if len(picks) else {}
        if gradients:
            norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in gradients.values()))
            scale = (clip / (norms + 1e-6)).clamp(max=1.0)
        for name, value in params.items():
            summed = torch.einsum("n,n...->...", scale, gradients[name]) if gradients else torch.zeros_like(value)
            # the clients' independent N(0, (sigma C)^2) noises sum to one of variance clients x (sigma C)^2
            noise = torch.randn(value.shape, generator=generator) * federation.noise_multiplier * clip
            noisy_mean = (summed + noise * federation.clients**0.5) / (federation.batch_size * federation.clients)
            params[name] = value - lr * noisy_mean
    return params


def accuracy(model: torch.nn.Module, params: dict[str, torch.Tensor], data: tuple[torch.Tensor, torch.Tensor]) -> float:
    with torch.no_grad():
        predicted = functional_call(model, params, (data[0],)).argmax(dim=1)
    return float((predicted == data[1]).float().mean())


def tune(
    model: torch.nn.Module,
    start: dict[str, torch.Tensor],
    train_data: tuple[torch.Tensor, torch.Tensor],
    validation: tuple[torch.Tensor, torch.Tensor],
    federation: Federation,
    epsilon: float,
    trials: int = TRIALS,
) -> Tuned:
    """The clipping norm and learning rate of highest public validation accuracy after the replayed federation."""
    import optuna  # a heavy import, only where DP-SGD is tuned

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    model.eval()  # lenet-fc has no batch statistics; eval only keeps functional_call free of train-mode state

    def objective(trial: optuna.Trial) -> float:
        clip = trial.suggest_float("max_grad_norm", *CLIP_RANGE, log=True)
        lr = trial.suggest_float("lr", *LR_RANGE, log=True)
        params = train(model, start, train_data, federation, clip, lr, seed=TUNING_SEED + trial.number)
        score = accuracy(model, params, validation)
        return score if score == score else 0.0  # a diverged trial (NaN) scores as nothing learned

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=TUNING_SEED))
    study.optimize(objective, n_trials=trials)
    best = study.best_trial
    return Tuned(
        epsilon=epsilon,
        noise_multiplier=federation.noise_multiplier,
        max_grad_norm=float(best.params["max_grad_norm"]),
        lr=float(best.params["lr"]),
        validation_accuracy=float(best.value),
    )


def cached_tuning(path: Path, epsilon: float, compute) -> Tuned:
    """The tuning of ``epsilon`` from ``path`` (a JSON object keyed by epsilon), computed and added when missing."""
    cache = json.loads(path.read_text()) if path.is_file() else {}
    key = f"{epsilon:g}"
    if key not in cache:
        tuned = compute()
        cache[key] = asdict(tuned)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cache, indent=1, sort_keys=True))
        print(
            f"DP-SGD at epsilon {epsilon:g} (noise multiplier {tuned.noise_multiplier:.3g}): clip "
            f"{tuned.max_grad_norm:.3g}, lr {tuned.lr:.3g}, public validation accuracy "
            f"{100 * tuned.validation_accuracy:.1f} %"
        )
    return Tuned(**cache[key])
