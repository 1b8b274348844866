"""Can the aggregated gradient of B images be inverted at all? The rank of d(gradient)/d(images) says.

Paper 003's set-up (DLG's sigmoid LeNet with uniform init, CIFAR-10 test images at 32x32x3): the gradient of
the mean cross-entropy of a batch of B images, as a function of the B x 3072 pixels. If its Jacobian at the
true images has rank below B x 3072, a subspace of image changes leaves the gradient unchanged to first
order: gradient matching alone cannot tell the truth from the images along it, whatever the optimizer, and
any attack must lean on a prior (TV, a generative model) to choose. The count explains it: the last layer's
7,690 gradient entries pin the B representations (12x8x8 each); what is left for the images is the B x 768
representations plus the 8,136 entries of the convolution gradients, against B x 3072 unknowns.

Prints, for B = 1, 2, 3: the Jacobian's size, its numerical rank (singular values above 1e-10 x the largest,
float64) and the dimension of the null space. Takes a few minutes on 2 cores for B = 3.

``--oracle`` (about 8 more minutes): what the best smoothness prior could recover for the largest B. Among the
images the gradient cannot tell from the truth (to first order: truth + null space), it takes the one with the
least squared finite differences, a quadratic stand-in for the TV prior, and prints its PSNR per image. An
attack that lands exactly on the truth's fibre and minimises smoothness there could reach this, not more.

    .venv/bin/python bench/identifiability.py [--data ../shared/data/cifar10_subset.npz] [--max-batch 3] [--oracle]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.func import functional_call, grad, jvp, vmap

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fedsim.config import ModelConfig  # noqa: E402
from fedsim.models import build_model  # noqa: E402

RELATIVE_TOLERANCE = 1e-10
CHUNK = 256  # Jacobian columns (JVPs) per vmapped call


def gradient_jacobian(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """d(flattened parameter gradient of the batch mean cross-entropy) / d(flattened images), (P, B*C*H*W)."""
    params = {name: p.detach() for name, p in model.named_parameters()}
    shape = x.shape

    def flat_gradient(pixels: torch.Tensor) -> torch.Tensor:
        def loss(p: dict[str, torch.Tensor]) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(functional_call(model, p, (pixels.reshape(shape),)), y)

        return torch.cat([g.reshape(-1) for g in grad(loss)(params).values()])

    point = x.reshape(-1)
    basis = torch.eye(point.numel(), dtype=x.dtype)
    columns = [
        vmap(lambda direction: jvp(flat_gradient, (point,), (direction,))[1])(basis[start : start + CHUNK])
        for start in range(0, point.numel(), CHUNK)
    ]
    return torch.cat(columns).T


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO / ".." / "shared" / "data" / "cifar10_subset.npz")
    parser.add_argument("--max-batch", type=int, default=3)
    parser.add_argument("--oracle", action="store_true", help="the smoothest gradient-equivalent images (largest B)")
    args = parser.parse_args()
    if not args.data.is_file():
        raise SystemExit(f"--data {args.data}: no such file (CIFAR-10 subset npz with x_test, y_test)")
    data = np.load(args.data)
    images = torch.from_numpy(data["x_test"][: args.max_batch].astype(np.float64) / 255.0)
    labels = torch.from_numpy(data["y_test"][: args.max_batch].astype(np.int64))
    model = build_model(ModelConfig(name="lenet", init="uniform"), 3, 10, 32, seed=0).double()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; sigmoid LeNet (uniform init), CIFAR-10 test "
          f"images 0-{args.max_batch - 1}, labels {labels.tolist()}, float64")  # fmt: skip
    for batch in range(1, args.max_batch + 1):
        start = time.perf_counter()
        jacobian = gradient_jacobian(model, images[:batch], labels[:batch])
        singular = torch.linalg.svdvals(jacobian)
        rank = int((singular > singular[0] * RELATIVE_TOLERANCE).sum())
        unknowns = jacobian.shape[1]
        seconds = time.perf_counter() - start
        head = f"B={batch}: Jacobian {jacobian.shape[0]} x {unknowns}, rank {rank}"
        if rank < unknowns:
            print(f"{head}, null space {unknowns - rank} dimensions (singular values fall from "
                  f"{singular[rank - 1]:.1e} to {singular[rank]:.1e}) [{seconds:.0f} s]")  # fmt: skip
        else:
            print(f"{head}, full rank (smallest singular value {singular[-1] / singular[0]:.1e} x the largest) "
                  f"[{seconds:.0f} s]")  # fmt: skip
    if args.oracle:
        start = time.perf_counter()
        estimate = smoothest_equivalent(jacobian, images)
        mse = ((estimate.clamp(0, 1) - images) ** 2).flatten(1).mean(dim=1)
        psnr = (10 * torch.log10(1.0 / mse)).tolist()
        print(f"oracle B={args.max_batch}: smoothest gradient-equivalent images, PSNR {' '.join(f'{v:.2f}' for v in psnr)} dB, "
              f"mean {sum(psnr) / len(psnr):.2f} dB [{time.perf_counter() - start:.0f} s]")  # fmt: skip


def smoothest_equivalent(jacobian: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
    """argmin ||D x||^2 over x = truth + null(J), D the horizontal and vertical finite differences per channel."""
    _, singular, vh = torch.linalg.svd(jacobian, full_matrices=False)
    rank = int((singular > singular[0] * RELATIVE_TOLERANCE).sum())
    null = vh[rank:].T  # (B*C*H*W, k)

    def differences(batch: torch.Tensor) -> torch.Tensor:  # (..., B*C*H*W) -> (..., number of differences)
        x = batch.reshape(*batch.shape[:-1], *images.shape)
        dx, dy = x[..., :, 1:] - x[..., :, :-1], x[..., 1:, :] - x[..., :-1, :]
        return torch.cat([dx.flatten(-4), dy.flatten(-4)], dim=-1)

    truth = images.reshape(-1)
    coefficients = torch.linalg.lstsq(differences(null.T).T, differences(truth)[:, None]).solution
    return (truth - (null @ coefficients)[:, 0]).reshape(images.shape)

if __name__ == "__main__":
    main()
