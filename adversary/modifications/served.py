"""The wire form of a module a malicious server serves: a description that holds no code.

A served module travels as JSON naming its architecture and that architecture's sizes
(``{"architecture": "imprint", "bins": 128, "input_size": 3072}``), its weights as the message's arrays. The
client rebuilds the module from its own code (``SERVED_ARCHITECTURES``) around a copy of the agreed model and
loads the weights: nothing the server sends is unpickled or run. A payload of another kind (bytes: a pickle)
or an architecture the client does not know is refused. A description is also bounded: a few hundred characters,
each size a whole number in the range its architecture allows (the input size: this client's own images), so a
server cannot make a client allocate what it likes; what does not fit is refused in one line naming the field.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, cast

import torch
from torch import nn

from adversary.modifications.registry import SERVED_ARCHITECTURES

ARCHITECTURE_KEY = "architecture"
MAX_DESCRIPTION_CHARS = 1024  # a description names an architecture and a few sizes; past this it is no description


class ServedModelError(RuntimeError):
    """A served model that the client cannot build from a description (a pickle, an unknown architecture)."""


def describe(module: nn.Module) -> str:
    """The description of ``module`` (an architecture registered in ``SERVED_ARCHITECTURES``) as JSON."""
    name = getattr(module, "architecture", None)
    if name not in SERVED_ARCHITECTURES:
        raise ServedModelError(
            f"a {type(module).__name__} is no served architecture; known: {', '.join(SERVED_ARCHITECTURES)}"
        )
    return json.dumps({ARCHITECTURE_KEY: name, **cast(Any, module).description()}, sort_keys=True)


def rebuild(payload: Any, agreed: nn.Module, input_shape: tuple[int, ...]) -> nn.Module:
    """The module ``payload`` describes, built by this client's code around a copy of ``agreed`` (its weights
    are loaded from the message afterwards) for inputs of ``input_shape`` (this client's images, C x H x W). The
    global random state is left as it was."""
    if not isinstance(payload, str):
        raise ServedModelError(
            f"the server sent a served model as {type(payload).__name__} (a pickle?); clients build served "
            "models from a description and never unpickle what a server sends"
        )
    if len(payload) > MAX_DESCRIPTION_CHARS:
        raise ServedModelError(
            f"the served model's description is {len(payload)} characters long; "
            f"allowed: at most {MAX_DESCRIPTION_CHARS}"
        )
    try:
        description = json.loads(payload)
    except (json.JSONDecodeError, RecursionError):
        description = None
    if not isinstance(description, dict) or ARCHITECTURE_KEY not in description:
        raise ServedModelError(f"the served model's description is not a JSON object naming its {ARCHITECTURE_KEY}")
    name = description.pop(ARCHITECTURE_KEY)
    if not isinstance(name, str) or name not in SERVED_ARCHITECTURES:
        raise ServedModelError(
            f"the server asked for architecture {name!r:.40}; this client builds: {', '.join(SERVED_ARCHITECTURES)}"
        )
    with torch.random.fork_rng(devices=[]):  # building layers draws initial weights: not from training's stream
        return SERVED_ARCHITECTURES.get(name)(copy.deepcopy(agreed), description, tuple(input_shape))


def described_sizes(description: Mapping[str, Any], architecture: str, allowed: Mapping[str, range]) -> dict[str, int]:
    """The sizes ``description`` gives, each a whole number within ``allowed[field]``; a missing, extra or
    out-of-range field is refused in one line naming it (a server's description, read on the client)."""
    what = f"the served {architecture} description"
    fields = ", ".join(sorted(allowed))
    for field in sorted(description):
        if field not in allowed:
            raise ServedModelError(f"{what} holds {field!r:.40}, which this client does not build; allowed: {fields}")
    sizes = {}
    for field, bounds in allowed.items():
        if field not in description:
            raise ServedModelError(f"{what} has no {field!r}; it needs: {fields}")
        value = description[field]
        span = f"{bounds.start}" if len(bounds) == 1 else f"{bounds.start} .. {bounds.stop - 1}"
        if isinstance(value, bool) or not isinstance(value, int) or value not in bounds:
            raise ServedModelError(f"{what}: {field} = {value!r:.40}; allowed: a whole number {span}")
        sizes[field] = value
    return sizes
