"""Canary examples entering an audited app's training through its own data function, in the node's own process.

The privacy audit of an app (``fedsim.engine.app_audit.privacy_audit``) gives each node its own canaries: mislabelled
held-out images, each included with probability 1/2. The app is not edited: while a probed train call runs
(``fedsim.engine.app_audit.client_probe``), the app's data function (``app.data.function``, e.g.
``opacusexample.task:load_data``), wherever the app's own modules hold it, returns its training loader with the node's
included canaries appended to the loader's data set; everything else it returns is untouched. Whatever the app does
with that loader then happens to the canaries as to its own examples: Opacus' Poisson sampling, per-example clipping
and noise included. Outside a probed train call the data function is the app's own.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

#: (the plan, the node's partition id, the canaries added per call) while a probed train call of an audited node runs
_ACTIVE: contextvars.ContextVar[tuple[DataCanaries, int, list[int]] | None] = contextvars.ContextVar(
    "fedsim_canaries", default=None
)
_WRAPPED = "__fedsim_canaries__"  # marks the wrapper, so that a module is never wrapped twice


@dataclass(frozen=True)
class DataCanaries:
    """What a node needs to add its included canaries to the app's training loader (pickled into every node).

    ``inserted``: per partition id, the included canaries' images (in the app's input space, as its loader yields
    them) and their wrong labels."""

    function: str  # `module:function`, the app's data function
    train_output: int | None  # which of its outputs is the training loader (None: it returns only that)
    image_key: str | int
    label_key: str | int
    inserted: dict[int, tuple[torch.Tensor, torch.Tensor]]


@contextlib.contextmanager
def canaries_for(plan: DataCanaries | None, partition: int) -> Iterator[list[int] | None]:
    """While inside (one train call of the node with ``partition``), the app's data function adds its canaries; yields
    the count added per call of it (None where the node has no canaries), which the probe notes: canaries that never
    entered (an app that reads its data elsewhere) must not pass for an audited node."""
    if plan is None or partition not in plan.inserted:
        yield None
        return
    install(plan.function)
    entered: list[int] = []
    token = _ACTIVE.set((plan, partition, entered))
    try:
        yield entered
    finally:
        _ACTIVE.reset(token)


def install(function: str) -> None:
    """Wrap the data function wherever the app's modules loaded so far hold it (``from task import load_data`` makes a
    second name for it), once each."""
    module_name, _, attribute = function.partition(":")
    package = module_name.split(".")[0]
    home = sys.modules.get(module_name)
    original = getattr(home, attribute, None) if home is not None else None
    if original is None:
        return  # the app has not imported it (or names it deeper): the probe notes that no canary entered
    original = getattr(original, _WRAPPED, original)
    wrapped = _wrapping(original)
    for name, module in list(sys.modules.items()):
        if module is None or not (name == package or name.startswith(package + ".")):
            continue
        for key, value in list(vars(module).items()):
            if value is original:
                setattr(module, key, wrapped)


@functools.cache
def _wrapping(original: Any) -> Any:
    @functools.wraps(original)
    def data_function(*args: Any, **kwargs: Any) -> Any:
        outputs = original(*args, **kwargs)
        active = _ACTIVE.get()
        if active is None:
            return outputs
        plan, partition, entered = active
        entered.append(len(plan.inserted[partition][1]))
        return with_canaries(outputs, plan, partition)

    setattr(data_function, _WRAPPED, original)
    return data_function


def with_canaries(outputs: Any, plan: DataCanaries, partition: int) -> Any:
    """The data function's ``outputs`` with the training loader's data set extended by the node's canaries."""
    x, y = plan.inserted[partition]
    if plan.train_output is None:
        return appended(outputs, x, y, plan)
    changed = list(outputs)
    changed[plan.train_output] = appended(changed[plan.train_output], x, y, plan)
    return type(outputs)(changed) if isinstance(outputs, tuple) else changed


def appended(loader: Any, x: torch.Tensor, y: torch.Tensor, plan: DataCanaries) -> DataLoader:
    """A loader like ``loader`` (batch size, shuffling, collation) over its data set followed by the canaries."""
    if not isinstance(loader, DataLoader) or loader.batch_size is None:
        raise TypeError(
            f"app.data.function = {plan.function!r}: its training output is {type(loader).__name__}, not a PyTorch "
            "DataLoader with a batch size; the privacy audit's canaries enter only such a loader"
        )
    data = WithCanaries(
        loader.dataset, [canary_item(loader.dataset, image, int(label), plan) for image, label in zip(x, y)]
    )
    return DataLoader(
        data,
        batch_size=loader.batch_size,
        shuffle=isinstance(loader.sampler, RandomSampler),
        collate_fn=loader.collate_fn,
        drop_last=loader.drop_last,
        num_workers=loader.num_workers,
        pin_memory=loader.pin_memory,
        generator=loader.generator,
    )


def canary_item(data: Any, image: torch.Tensor, label: int, plan: DataCanaries) -> Any:
    """One canary shaped as the data set's items (its first item as the template): a dict with the same keys, or a
    tuple with the same positions; the label of the template's type."""
    template = data[0]
    typed_label: Any = (
        torch.tensor(label, dtype=template[plan.label_key].dtype)
        if isinstance(template[plan.label_key], torch.Tensor)
        else label
    )
    if isinstance(template, dict):
        return {**template, plan.image_key: image.clone(), plan.label_key: typed_label}
    item = list(template)
    item[int(plan.image_key)], item[int(plan.label_key)] = image.clone(), typed_label
    return tuple(item) if isinstance(template, tuple) else item


class WithCanaries(Dataset):
    """The app's data set followed by canary items; ``base_size``: where the canaries start (the probe notes a step's
    samples by index below it)."""

    def __init__(self, base: Any, canaries: list[Any]) -> None:
        self.base, self.canaries, self.base_size = base, canaries, len(base)

    def __len__(self) -> int:
        return self.base_size + len(self.canaries)

    def __getitem__(self, index: int) -> Any:
        return self.base[index] if index < self.base_size else self.canaries[index - self.base_size]
