"""FedLeak beside Inverting Gradients on the same updates, under FedLeak's practical protocol at CPU size.

The protocol of ``configs/fedleak-practical.yaml``, without a federation: CIFAR-10 (``cifar10_subset.npz``) with
its **test** images as the attacker's public data and its training images split over ``--clients`` clients by
Dirichlet label skew (alpha 0.5, ``fedsim.data.partition_indices``); DLG's tanh LeNet trained on the public images
for ``--epochs`` epochs (the trained model a federation sends, not its initialisation); every client sends the
gradient of one batch of ``--batch`` images of its own (one SGD step, learning rate known to the attacker, labels
recovered from the update). On each update ``ig`` and ``fedleak`` run with the same budget, each tuned first on
public problems of the same setting (``--trials`` Optuna trials; 0 = their own settings). Scores: SSIM and PSNR of
every image against its closest reconstruction (paired by MSE); beside them the same scores of ``--batch`` public
images drawn at random (a guess without the update: an attack that does not beat it shows nothing).

    nice -n 15 .venv/bin/python -m bench.fedleak --data-dir DIR [--clients 4] [--batch 8] [--iterations 1000] \
        [--trials 0] [--tune-iterations 200] [--docs]

``--docs`` writes the table into docs/results/attacks.md between its fedleak-table markers.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from adversary.inversion import run_attack
from adversary.inversion.options import AttackOptions
from adversary.inversion.tuning import PublicProblems, TuningTask, tune, with_params
from adversary.view import AttackerView, LocalTraining
from bench.common import CIFAR, REPO, add_data_dir, data_file, write_between_markers
from fedsim.config import parse_config
from fedsim.data import partition_indices
from fedsim.judge.matching import pair_by_mse
from fedsim.judge.metrics import psnr, ssim
from fedsim.judge.scoring import public_ssim
from fedsim.models import build_model

LR = 0.05
ATTACKS = ("ig", "fedleak")
PAGE, MARKER = REPO / "docs" / "results" / "attacks.md", "fedleak-table"
CPU = torch.device("cpu")


def trained_lenet(images: torch.Tensor, labels: torch.Tensor, epochs: int) -> torch.nn.Module:
    """DLG's tanh LeNet trained by SGD (lr 0.01, momentum 0.9, batches of 32) on the public images."""
    config = parse_config({"model": {"name": "lenet", "activation": "tanh"}}).model
    model = build_model(config, 3, 10, 32, seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)  # 0.05 diverged (9 % after 10 epochs)
    generator = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        for batch in torch.randperm(len(images), generator=generator).split(32):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(images[batch]), labels[batch]).backward()
            optimizer.step()
    return model


def accuracy(model: torch.nn.Module, images: torch.Tensor, labels: np.ndarray) -> float:
    with torch.no_grad():
        return float((model(images).argmax(1).numpy() == labels).mean())


def view_of(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, client: int) -> AttackerView:
    """What a wire tap sees of one client's one-step update of ``images``."""
    loss = torch.nn.functional.cross_entropy(model(images), labels)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    sent = {name: g.detach() for (name, _), g in zip(model.named_parameters(), grads, strict=True)}
    return AttackerView(
        round=1,
        tap="mitm",
        target=f"client:{client}",
        model=model,
        global_state=state,
        observed_state={k: state[k] - LR * sent[k] if k in sent else state[k] for k in state},
        input_shape=(3, 32, 32),
        num_classes=10,
        num_samples=len(images),
        input_bounds=(torch.zeros(3), torch.ones(3)),
        local_training=LocalTraining(lr=LR, local_steps=1, batch_size=len(images)),
    )


def paired_scores(estimate: torch.Tensor, truth: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per true image: SSIM and PSNR (dB) against its closest estimate (paired by MSE)."""
    estimate = estimate.reshape(truth.shape).clamp(0, 1)
    rec, true = pair_by_mse(estimate, truth)
    return ssim(estimate[rec], truth[true]).tolist(), psnr(estimate[rec], truth[true]).tolist()


def tuned(name: str, args: argparse.Namespace, public: PublicProblems) -> tuple[AttackOptions, str]:
    """``name`` at ``--iterations``, with what ``--trials`` trials of ``--tune-iterations`` chose on ``public``."""
    options = AttackOptions(name=name, iterations=args.iterations)
    if args.trials == 0:
        return options, "own settings"
    setting = {"bench": "fedleak", "attack": name}
    task = TuningTask(public, trials=args.trials, seed=0, setting=setting, max_iterations=args.tune_iterations)
    tuning = tune(options, task, CPU)
    if tuning is None:
        return options, "own settings"
    chosen = ", ".join(f"{k.split('.')[-2] if '.' in k else k} {v:.3g}" for k, v in tuning.params.items())
    return with_params(options, tuning.params), f"tuned ({chosen})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_dir(parser)
    parser.add_argument("--clients", type=int, default=4, help="clients attacked (of 10 Dirichlet partitions)")
    parser.add_argument("--batch", type=int, default=8, help="images per client update")
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=10, help="training epochs of the model on the public images")
    parser.add_argument("--trials", type=int, default=0, help="Optuna trials per attack on public problems")
    parser.add_argument("--tune-iterations", type=int, default=200, help="iterations per tuning trial")
    parser.add_argument("--docs", action="store_true", help=f"write the table into {PAGE.relative_to(REPO)}")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = np.load(data_file(args.data_dir, CIFAR))
    public_x = torch.from_numpy(data["x_test"]).float() / 255.0
    public_y = torch.from_numpy(data["y_test"]).long()
    train_x = torch.from_numpy(data["x_train"]).float() / 255.0
    train_y = data["y_train"].astype(np.int64)
    model = trained_lenet(public_x, public_y, args.epochs)
    held_out = accuracy(model, train_x, train_y)  # the clients' images, never trained on
    partition = parse_config({"data": {"partition": {"name": "dirichlet", "alpha": 0.5}}}).data
    parts = partition_indices(train_y, partition, 10, seed=0)
    rng = np.random.default_rng(0)
    views, truths = [], []
    for client in range(args.clients):
        ids = rng.choice(parts[client], size=args.batch, replace=False)
        images, labels = train_x[ids], torch.from_numpy(train_y[ids])
        views.append(view_of(model, images, labels, client))
        truths.append(images)
    public_ids = [rng.choice(len(public_x), size=args.batch, replace=False) for _ in range(2)]
    public = PublicProblems(
        [view_of(model, public_x[i], public_y[i], -1) for i in public_ids],
        [public_x[i] for i in public_ids],
        [public_y[i] for i in public_ids],
        (0.0, 0.0, 0.0),
        (1.0, 1.0, 1.0),
        public_ssim,
    )
    print(
        f"lenet (tanh) trained {args.epochs} epochs on {len(public_x)} public images (accuracy on the "
        f"{len(train_x)} clients' images {held_out:.3f}); {args.clients} clients x {args.batch} images "
        "(Dirichlet 0.5), one step",
        flush=True,
    )
    rows = [score_guesses(public_x, truths, rng)]
    for name in ATTACKS:
        options, how = tuned(name, args, public)
        start = time.time()
        reconstructions = run_attack(options, views, seed=0, device=CPU)
        seconds = time.time() - start
        ssims, psnrs = [], []
        for reconstruction, truth in zip(reconstructions, truths, strict=True):
            s, p = paired_scores(reconstruction.images, truth)
            ssims += s
            psnrs += p
        rows.append((f"`{name}`", how, ssims, psnrs, f"{seconds:.0f}"))
        print(f"{name:<8} {how}: SSIM {np.mean(ssims):.3f}  PSNR median {np.median(psnrs):.1f} dB", flush=True)
    table = table_lines(rows, args, held_out)
    print("\n".join(table))
    if args.docs:
        write_between_markers(PAGE, MARKER, table)


def score_guesses(public_x: torch.Tensor, truths: list[torch.Tensor], rng: np.random.Generator) -> tuple:
    """The scores of ``batch`` random public images per client, paired like a reconstruction."""
    ssims, psnrs = [], []
    for truth in truths:
        guess = public_x[rng.choice(len(public_x), size=len(truth), replace=False)]
        s, p = paired_scores(guess, truth)
        ssims += s
        psnrs += p
    return ("random public images", "-", ssims, psnrs, "-")


def table_lines(rows: list[tuple], args: argparse.Namespace, held_out: float) -> list[str]:
    lines = [
        "",
        f"`python -m bench.fedleak --clients {args.clients} --batch {args.batch} --iterations {args.iterations} "
        f"--epochs {args.epochs} --trials {args.trials} --tune-iterations {args.tune_iterations}` (the model's "
        f"accuracy on the clients' images {held_out:.3f}, 10 % is chance; {args.clients * args.batch} client images):",
        "",
        "| attack | settings | SSIM (mean over images) | PSNR (median, dB) | seconds |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, how, ssims, psnrs, seconds in rows:
        lines.append(f"| {name} | {how} | {np.mean(ssims):.3f} | {np.median(psnrs):.1f} | {seconds} |")
    return [*lines, ""]


if __name__ == "__main__":
    main()
