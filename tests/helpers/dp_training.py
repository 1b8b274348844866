"""A toy client trained under DP-SGD for a few rounds, with its privacy ledger."""

import numpy as np
import torch
from torch import nn

from clients.defenses.base import TrainingContext
from clients.training import train_locally
from fedsim.config import parse_config

N = 40
IDS = np.arange(1000, 1000 + N)  # global sample ids of the client's rows


def client(*defenses, **training):
    return parse_config({"client": {"defenses": list(defenses), **training}}).client


def dpsgd(**options):
    return {"name": "dpsgd", **options}


def toy(dtype=torch.float32, classes=2):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(N, 1, 4, 4, generator=generator, dtype=dtype)
    y = (x.mean(dim=(1, 2, 3)) > 0).long()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, classes)).to(dtype)
    return model, x, y


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def rounds(model, x, y, cfg, ledger_dir, planned, run=None):
    """Train rounds ``run`` (default 1..planned) and return each round's records."""
    records = []
    for server_round in run or range(1, planned + 1):
        context = TrainingContext(server_round, planned, ledger_dir)
        records.append(train_locally(model, x, y, IDS, cfg, seed=server_round, context=context).defense_records)
    return records


def assert_plain(model):
    """What a client caches across rounds is a plain module again: no hooks, no Opacus attributes."""
    for module in model.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks and not module._backward_hooks
    for parameter in model.parameters():
        assert not {"grad_sample", "summed_grad", "_forward_counter"} & set(vars(parameter))
