"""``fedsim vulnerability`` (RV of a run's initial model) and ``fedsim prior train`` (a generative prior for
attacks such as ggssr)."""

from __future__ import annotations

import argparse

from fedsim.core.errors import ConfigError


def vulnerability_command(args: argparse.Namespace) -> int:
    """RV (Reconstruction Vulnerability) of the run's initial global model on the first training images
    (see fedsim.judge.vulnerability)."""
    import torch

    from fedsim.config import load_config
    from fedsim.data import load_dataset
    from fedsim.engine.assembly import run_model_of
    from fedsim.judge.vulnerability import reconstruction_vulnerability

    config = load_config(args.config, args.set)
    data = load_dataset(config.data, seed=config.seed)
    model = run_model_of(config, data, config.seed, with_weights=True).eval()
    x, y = torch.from_numpy(data.x_train[: args.samples]), torch.from_numpy(data.y_train[: args.samples])
    result = reconstruction_vulnerability(model, x, y, projections=args.projections, seed=config.seed)
    print(
        f"model {config.model.name}: RV = {result.rv:.6g} +- {result.standard_error:.2g} (standard error; "
        f"{result.samples} samples x {result.projections} projections)"
    )
    return 0


def prior_train_command(args: argparse.Namespace) -> int:
    """Train a diffusion prior on the data set's test split (no client holds those images)."""
    from adversary.priors.training import train_prior
    from fedsim.config import DataConfig
    from fedsim.data import load_dataset

    data = load_dataset(DataConfig(dataset=args.dataset, image_size=args.image_size), seed=args.seed)
    if len(data.x_test) == 0:
        raise ConfigError(f"--dataset {args.dataset}: it has no held-out test images to train a prior on")
    record = train_prior(
        data.x_test,
        args.out,
        dataset=args.dataset,
        split="test",
        preset=args.preset,
        steps=args.steps,
        seed=args.seed,
        resume=args.resume,
        threads=args.threads,
    )
    print(f"{args.out}: prior trained on {record.images} test images of {args.dataset} ({record.steps} steps)")
    return 0
