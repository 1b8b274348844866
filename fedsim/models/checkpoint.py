"""Loading a saved state_dict into a freshly built model, with one-line errors instead of tracebacks."""

from __future__ import annotations

import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fedsim.core.errors import first_line
from fedsim.models.registry import ModelError

#: Keys under which training scripts commonly nest the state_dict next to optimizer state, epoch, ...
WRAPPER_KEYS = ("model", "state_dict")


def load_checkpoint(model: nn.Module, path: Path | str, model_name: str) -> None:
    """Load ``path`` (``weights_only=True``) into ``model`` strictly; ModelError names the first mismatch."""
    field = f"model.checkpoint = '{path}'"
    file = Path(path).expanduser()
    if not file.is_file():
        raise ModelError(f"{field}: file does not exist")
    try:
        loaded = load_weights_only(file, field)
    except ModelError:
        raise
    except Exception as error:  # torch.load raises many more types for truncated or foreign files
        raise ModelError(f"{field}: cannot be read as a weights-only state_dict ({first_line(error)})") from None
    state = unwrap_state_dict(loaded)
    if state is None:
        raise ModelError(
            f"{field}: holds a {type(loaded).__name__}, not a state_dict "
            f"(a dict of tensors, optionally under {' or '.join(repr(k) for k in WRAPPER_KEYS)})"
        )
    problems = state_dict_mismatches(model.state_dict(), state)
    if not problems:
        problems = [
            f"key '{key}' holds NaN or infinite values"
            for key, tensor in state.items()
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())
        ]
    if problems:
        more = f" ({len(problems)} mismatching keys)" if len(problems) > 1 else ""
        raise ModelError(f"{field}: does not fit model '{model_name}': {problems[0]}{more}")
    model.load_state_dict(state, strict=True)


def load_weights_only(path: Path, what: str) -> Any:
    """``torch.load(path, weights_only=True)``: tensors, containers and numbers only.

    Torch refuses a pickle that names anything else (a class, or a callable such as ``open`` that would run
    on load) before running it; the refusal becomes one ModelError naming ``what`` (the field or the file)
    instead of torch's paragraph advising to load the file unsafely.
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        text = str(error)
        if refused := re.search(r"Unsupported global: GLOBAL (\S+)", text):
            raise ModelError(
                f"{what}: holds objects other than tensors (it names {refused.group(1)}); refused without "
                "unpickling it, since loading it could run code: replace it with a file of tensors only"
            ) from None
        reason = text.partition("WeightsUnpickler error:")[2].splitlines()
        detail = next((line.strip() for line in reason if line.strip()), "not a torch file")
        raise ModelError(f"{what}: cannot be read as a file of tensors ({detail}); nothing in it was run") from None


def unwrap_state_dict(loaded: Any) -> Mapping[str, torch.Tensor] | None:
    """The state_dict itself, or the one nested under 'model' / 'state_dict'; None if neither."""
    if not isinstance(loaded, Mapping):
        return None
    for key in WRAPPER_KEYS:
        if isinstance(loaded.get(key), Mapping):
            return loaded[key]
    if all(isinstance(key, str) and isinstance(value, torch.Tensor) for key, value in loaded.items()):
        return loaded
    return None


def state_dict_mismatches(expected: Mapping[str, torch.Tensor], given: Mapping[str, Any]) -> list[str]:
    """Human-readable differences, in the model's key order: missing, mis-shaped, then unexpected keys."""
    problems: list[str] = []
    for key, tensor in expected.items():
        if key not in given:
            problems.append(f"key '{key}' is missing from the checkpoint")
        elif not isinstance(given[key], torch.Tensor):
            problems.append(f"key '{key}' holds a {type(given[key]).__name__}, not a tensor")
        elif given[key].shape != tensor.shape:
            shapes = f"{list(given[key].shape)} in the checkpoint but {list(tensor.shape)} in the model"
            problems.append(f"key '{key}' has shape {shapes}")
    problems.extend(f"unexpected key '{key}' in the checkpoint" for key in given if key not in expected)
    return problems
