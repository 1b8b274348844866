"""Entry points: run an attack on a round's views."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from adversary.inversion.options import AttackOptions
from adversary.registry import ATTACKS
from adversary.view import AttackerView, Reconstruction


def _attack(name: str) -> Callable[..., list[Reconstruction]]:  # an Attack, or an analytic attack's function
    try:
        return ATTACKS.get(name)
    except KeyError as error:
        raise ValueError(error.args[0]) from None


def run_attack(
    options: AttackOptions, views: Sequence[AttackerView], seed: int, device: torch.device
) -> list[Reconstruction]:
    """Run the attack ``options.name`` on ``views``.

    Views of one round that share the architecture, the global state, num_samples and the local training
    are solved together with all restarts as one batched problem on ``device``.

    Parameters
    ----------
    options
        The attack's validated options (an ``adversary.attacks[]`` entry); ``options.name`` picks the attack.
    views
        The targets: what the attacker saw of each, nothing of the ground truth.
    seed
        The seed of the attack's random starts.
    device
        Where the problem is solved.

    Returns
    -------
    list[Reconstruction]
        One per view, in order, on the CPU.

    Raises
    ------
    ValueError
        ``options.name`` names no registered attack.
    """
    attack = _attack(options.name)
    return attack(list(views), options, seed, torch.device(device))
