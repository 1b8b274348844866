"""Can the aggregated gradient of B images be inverted at all? The rank of d(gradient)/d(images) says.

Paper 003's set-up (DLG's sigmoid LeNet with uniform init, CIFAR-10 test images at 32x32x3): the gradient of
the mean cross-entropy of a batch of B images, as a function of the B x 3072 pixels. If its Jacobian at the
true images has rank below B x 3072, a subspace of image changes leaves the gradient unchanged to first
order: gradient matching alone cannot tell the truth from the images along it, whatever the optimizer, and
any attack must lean on a prior (TV, a generative model) to choose. The count explains it: the last layer's
7,690 gradient entries pin the B representations (12x8x8 each); what is left for the images is the B x 768
representations plus the 8,136 entries of the convolution gradients, against B x 3072 unknowns.

Prints, for B = 1, 2, 3: the Jacobian's size and its singular-value spectrum (quantiles, relative to the
largest), the largest gap between consecutive singular values and where it sits, and the numerical rank
at several relative cut-offs (1e-6 to 1e-12, float64), at the true images and at ``--perturbed`` other
points (the truth plus N(0, 0.05^2) noise, and uniform random images), since a rank measured at one point
may be that point's accident. A rank that stays below B x C x H x W across cut-offs, with a gap of many orders
of magnitude at the same index, and at every point, is what "first-order non-identifiable" rests on; it
says nothing about what an attack with a prior recovers. Takes a few minutes per point on 2 cores for B = 3.

``--oracle`` (about 8 more minutes): a reference point for the largest B, not a bound. Among the images the
gradient cannot tell from the truth to first order (truth + null space), it takes the one with the least
squared finite differences (a quadratic stand-in for TV), chosen with the truth in hand, and prints its
PSNR. Attacks can land above it (TV is not quadratic, the fibre is curved, other priors exist) or below it.

    .venv/bin/python -m bench.identifiability [--data-dir DIR] [--max-batch 3] [--oracle]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch.func import functional_call, grad, jvp, vmap

from bench.common import CIFAR, add_data_dir, data_file
from fedsim.config import ModelConfig
from fedsim.judge.metrics import psnr
from fedsim.models import build_model

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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_dir(parser)
    parser.add_argument("--max-batch", type=int, default=3)
    parser.add_argument("--oracle", action="store_true", help="the smoothest gradient-equivalent images (largest B)")
    parser.add_argument(
        "--perturbed", type=int, default=2, choices=(0, 1, 2), help="other points to measure the rank at"
    )
    args = parser.parse_args(argv)
    data = np.load(data_file(args.data_dir, CIFAR))
    images = torch.from_numpy(data["x_test"][: args.max_batch].astype(np.float64) / 255.0)
    labels = torch.from_numpy(data["y_test"][: args.max_batch].astype(np.int64))
    model = build_model(ModelConfig(name="lenet", init="uniform"), 3, 10, 32, seed=0).double()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; sigmoid LeNet (uniform init), CIFAR-10 test "
        f"images 0-{args.max_batch - 1}, labels {labels.tolist()}, float64"
    )
    generator = torch.Generator().manual_seed(0)
    for batch in range(1, args.max_batch + 1):
        truth = images[:batch]
        points = {
            "truth": truth,
            "truth+noise": truth + 0.05 * torch.randn(truth.shape, generator=generator, dtype=truth.dtype),
            "random": torch.rand(truth.shape, generator=generator, dtype=truth.dtype),
        }
        for point, pixels in list(points.items())[: 1 + args.perturbed]:
            start = time.perf_counter()
            jacobian = gradient_jacobian(model, pixels, labels[:batch])
            singular = torch.linalg.svdvals(jacobian)
            if point == "truth":
                truth_jacobian = jacobian
            describe(f"B={batch} {point}", jacobian.shape, singular, time.perf_counter() - start)
    if args.oracle:
        start = time.perf_counter()
        estimate = smoothest_equivalent(truth_jacobian, images)
        per_image = psnr(estimate.clamp(0, 1), images).tolist()
        print(
            f"oracle B={args.max_batch}: smoothest gradient-equivalent images, "
            f"PSNR {' '.join(f'{v:.2f}' for v in per_image)} dB, "
            f"mean {sum(per_image) / len(per_image):.2f} dB [{time.perf_counter() - start:.0f} s]"
        )


def describe(head: str, shape: tuple[int, int], singular: torch.Tensor, seconds: float) -> None:
    """Print the spectrum's quantiles, its largest gap and the rank at several cut-offs."""
    relative = singular / singular[0]
    unknowns = shape[1]
    quantiles = [relative[min(len(relative) - 1, int(q * (len(relative) - 1)))].item() for q in (0.25, 0.5, 0.75, 1.0)]
    ratios = relative[:-1] / relative[1:].clamp(min=1e-300)
    gap = int(torch.argmax(ratios))
    ranks = {cut: int((relative > cut).sum()) for cut in (1e-6, 1e-8, 1e-10, 1e-12)}
    print(
        f"{head}: Jacobian {shape[0]} x {unknowns}; singular values / largest at 25/50/75/100 % of the spectrum "
        f"{' '.join(f'{q:.1e}' for q in quantiles)}; largest gap x{ratios[gap]:.1e} after index {gap + 1}; "
        f"rank at cut-off {', '.join(f'{cut:.0e}: {rank}' for cut, rank in ranks.items())} "
        f"of {unknowns} [{seconds:.0f} s]",
        flush=True,
    )


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
