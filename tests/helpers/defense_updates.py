"""Random updates and a defense context, to run one update defense at a time."""

import torch
from torch import nn

from clients.defenses import DEFENSES, DefenseContext
from fedsim.config import parse_config


def defenses(*entries):
    return parse_config({"client": {"defenses": list(entries)}}).client.defenses


def context(seed=0, model=None, x=None):
    model = model if model is not None else nn.Linear(2, 2)
    x = x if x is not None else torch.zeros(1, 2)
    return DefenseContext(
        model=model, x=x, y=torch.zeros(len(x), dtype=torch.long), lr=0.1, generator=torch.Generator().manual_seed(seed)
    )


def apply(entry, update, ctx=None):
    (config,) = defenses(entry)
    return DEFENSES.get(config.name).apply(update, config, ctx or context())


def random_update(seed=0, shapes=((40, 50), (50,), (10, 40))):
    generator = torch.Generator().manual_seed(seed)
    return {f"layer{i}": torch.randn(shape, generator=generator, dtype=torch.float64) for i, shape in enumerate(shapes)}
