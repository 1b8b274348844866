"""The wire form of a module a malicious server serves: a description that holds no code.

A served module travels as JSON naming its architecture and that architecture's sizes
(``{"architecture": "imprint", "bins": 128, "input_size": 3072}``), its weights as the message's arrays. The
client rebuilds the module from its own code (``SERVED_ARCHITECTURES``) around a copy of the agreed model and
loads the weights: nothing the server sends is unpickled or run. A payload of another kind (bytes: a pickle)
or an architecture the client does not know is refused.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import torch
from torch import nn

from adversary.modifications.registry import SERVED_ARCHITECTURES

ARCHITECTURE_KEY = "architecture"


class ServedModelError(RuntimeError):
    """A served model that the client cannot build from a description (a pickle, an unknown architecture)."""


def describe(module: nn.Module) -> str:
    """The description of ``module`` (an architecture registered in ``SERVED_ARCHITECTURES``) as JSON."""
    name = getattr(module, "architecture", None)
    if name not in SERVED_ARCHITECTURES:
        raise ServedModelError(
            f"a {type(module).__name__} is no served architecture; known: {', '.join(SERVED_ARCHITECTURES)}"
        )
    return json.dumps({ARCHITECTURE_KEY: name, **module.description()}, sort_keys=True)


def rebuild(payload: Any, agreed: nn.Module) -> nn.Module:
    """The module ``payload`` describes, built by this client's code around a copy of ``agreed`` (its weights
    are loaded from the message afterwards). The global random state is left as it was."""
    if not isinstance(payload, str):
        raise ServedModelError(
            f"the server sent a served model as {type(payload).__name__} (a pickle?); clients build served "
            "models from a description and never unpickle what a server sends"
        )
    try:
        description = json.loads(payload)
    except json.JSONDecodeError:
        description = None
    if not isinstance(description, dict) or ARCHITECTURE_KEY not in description:
        raise ServedModelError(f"the served model's description is not a JSON object naming its {ARCHITECTURE_KEY}")
    name = description.pop(ARCHITECTURE_KEY)
    if name not in SERVED_ARCHITECTURES:
        raise ServedModelError(
            f"the server asked for architecture {name!r}; this client builds: {', '.join(SERVED_ARCHITECTURES)}"
        )
    with torch.random.fork_rng(devices=[]):  # building layers draws initial weights: not from training's stream
        return SERVED_ARCHITECTURES.get(name)(copy.deepcopy(agreed), description)
