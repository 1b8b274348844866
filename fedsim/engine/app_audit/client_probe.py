"""What an audited app's clients do, noted where they do it: in the node's own process. Their DP, and the samples
each local step drew from its data loader (the ground truth of what an update was trained on).

``ProbedClientApp`` is the app's ClientApp, called exactly as Flower calls it; while a call runs, Opacus'
``PrivacyEngine.make_private*`` and Flower's ``LocalDpMod`` note what they were set to (and, for ``LocalDpMod``, the
noise it actually added to the update: its output minus the clipped update it was given). Each call's notes go, as
one JSON line, to a file of the node's process in the run directory; the message and the reply are not touched and
no random number is drawn, so the app trains as it would without the probe. A step is read where PyTorch's
DataLoader asks its sampler for the next batch's indices (any sampler: shuffling, Opacus' Poisson sampling), noted
with the length of the data set they index.
"""

from __future__ import annotations

import contextvars
import functools
import json
import os
from pathlib import Path
from typing import Any, cast

import numpy as np

import fedsim.core.wire as wire
from fedsim.engine.app_audit.data_canaries import DataCanaries, WithCanaries, canaries_for
from fedsim.engine.app_audit.notes import TRAIN

#: the notes of the call running in this thread (None outside a probed call)
_NOTES: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar("fedsim_dp_notes", default=None)
_STEPS: contextvars.ContextVar[list[list[Any]] | None] = contextvars.ContextVar("fedsim_steps", default=None)
#: a dry call (``first_training``): the first batch its data loaders draw ends it
_DRY: contextvars.ContextVar[bool] = contextvars.ContextVar("fedsim_dry_call", default=False)
_INSTALLED: set[str] = set()

OPACUS = "opacus-dpsgd"
OPACUS_SPENT = "opacus-epsilon-spent"  # what the app asked Opacus' accountant: its own epsilon claim and its delta
LOCAL_DP = "flower-localdp"
CANARIES_ENTERED = "audit-canaries-entered"  # the privacy audit's canaries the app's data function added in a call
LOCAL_DP_REFUSED = "flower-localdp-refused"  # LocalDpMod answered a reply of the app with an error (readdressed)


class ProbedClientApp:
    """The app's ClientApp with its DP noted beside each call (see the module docstring)."""

    def __init__(self, app: Any, notes_dir: Path, canaries: DataCanaries | None = None) -> None:
        """``canaries``: the privacy audit's, added to the app's training data in train calls (None: no audit)."""
        self._app = app
        self._notes_dir = Path(notes_dir)
        self._canaries = canaries

    def __call__(self, message: Any, context: Any) -> Any:
        install_recorders()
        notes: list[dict[str, Any]] = []
        steps: list[list[Any]] = []
        token, steps_token = _NOTES.set(notes), _STEPS.set(steps)
        training = str(message.metadata.message_type) == TRAIN
        partition = int(context.node_config.get(wire.PARTITION_ID, -1))
        try:
            with canaries_for(self._canaries if training else None, partition) as entered:
                reply = self._app(message=message, context=context)
                if entered is not None:
                    note({"mechanism": CANARIES_ENTERED, "data_function_calls": len(entered), "added": sum(entered)})
                return reply
        finally:
            _NOTES.reset(token)
            _STEPS.reset(steps_token)
            if notes or steps:
                self._write(message, context, notes, steps)

    def _write(self, message: Any, context: Any, notes: list[dict[str, Any]], steps: list[list[Any]]) -> None:
        from fedsim.engine.app_audit.grid import message_round

        line = {
            "round": message_round(message),
            "client": int(context.node_config.get(wire.PARTITION_ID, -1)),
            "message_type": str(message.metadata.message_type),
            "findings": notes,
            "steps": steps,  # [length of the data set indexed, [indices of one batch]] per batch drawn
        }
        self._notes_dir.mkdir(parents=True, exist_ok=True)
        with (self._notes_dir / f"{os.getpid()}.jsonl").open("a") as file:
            file.write(json.dumps(line) + "\n")


class FirstBatchDrawn(BaseException):
    """A dry call reached its first training batch: whatever DP it trains with was set up by then. A BaseException,
    so that an app catching its own errors does not catch this."""


def first_training(app: Any, message: Any, context: Any) -> list[dict[str, Any]]:
    """What the ClientApp ``app`` sets up for training on ``message``, noted as in a probed call, with the call ended
    where its data loader draws its first batch (before any step trains; an app whose training draws from no PyTorch
    DataLoader trains in full). Its own error is raised as it is."""
    install_recorders()
    notes: list[dict[str, Any]] = []
    tokens = _NOTES.set(notes), _STEPS.set([]), _DRY.set(True)
    try:
        app(message=message, context=context)
    except FirstBatchDrawn:
        pass
    finally:
        _NOTES.reset(tokens[0])
        _STEPS.reset(tokens[1])
        _DRY.reset(tokens[2])
    return notes


def note(finding: dict[str, Any]) -> None:
    notes = _NOTES.get()
    if notes is not None:
        notes.append(finding)


def install_recorders() -> None:
    """Wrap Opacus' and Flower's DP entry points in this process, once; each still does what it did."""
    if "opacus" not in _INSTALLED:
        _INSTALLED.add("opacus")
        try:
            from opacus import PrivacyEngine
        except ImportError:  # an app without Opacus cannot use it
            pass
        else:
            for name in ("make_private", "make_private_with_epsilon"):
                setattr(PrivacyEngine, name, _noting_opacus(getattr(PrivacyEngine, name)))
            setattr(PrivacyEngine, "get_epsilon", _noting_spent(PrivacyEngine.get_epsilon))  # noqa: B010
    if "steps" not in _INSTALLED:
        _INSTALLED.add("steps")
        from torch.utils.data import dataloader

        # setattr: mypy refuses assigning to a method, and replacing it is the point
        iterator = dataloader._BaseDataLoaderIter
        setattr(iterator, "_next_index", _noting_steps(iterator._next_index))  # noqa: B010
    if "localdp" not in _INSTALLED:
        _INSTALLED.add("localdp")
        from flwr.client.mod import LocalDpMod as LegacyLocalDpMod
        from flwr.clientapp.mod import LocalDpMod

        for kind in {LocalDpMod, LegacyLocalDpMod}:
            setattr(kind, "__call__", _noting_local_dp(kind.__call__))  # noqa: B010


def _noting_steps(next_index: Any) -> Any:
    @functools.wraps(next_index)
    def noted(iterator: Any) -> Any:
        indices = next_index(iterator)  # StopIteration ends the epoch as before
        steps = _STEPS.get()
        if steps is not None:
            # the privacy audit's canaries follow the app's own samples: a step is noted by the samples it drew
            data = iterator._dataset
            size = data.base_size if isinstance(data, WithCanaries) else len(data)
            drawn = np.atleast_1d(np.asarray(indices, dtype=np.int64))
            steps.append([size, drawn[drawn < size].tolist()])
        if _DRY.get():
            raise FirstBatchDrawn
        return indices

    return noted


def _noting_opacus(make_private: Any) -> Any:
    @functools.wraps(make_private)
    def noted(engine: Any, *args: Any, **kwargs: Any) -> Any:
        made = make_private(engine, *args, **kwargs)
        optimizer = made[1]
        max_grad_norm = optimizer.max_grad_norm
        note(
            {
                "mechanism": OPACUS,
                "noise_multiplier": float(optimizer.noise_multiplier),
                "max_grad_norm": float(cast(float, max_grad_norm))
                if np.isscalar(max_grad_norm)
                else list(max_grad_norm),
                "expected_batch_size": optimizer.expected_batch_size,
                "poisson_sampling": bool(kwargs.get("poisson_sampling", True)),
                "accountant": engine.accountant.mechanism(),
            }
        )
        return made

    return noted


def _noting_spent(get_epsilon: Any) -> Any:
    @functools.wraps(get_epsilon)
    def noted(engine: Any, delta: float) -> Any:
        epsilon = get_epsilon(engine, delta)
        history = getattr(engine.accountant, "history", [])
        steps = sum(int(entry[-1]) for entry in history if isinstance(entry, tuple))
        note({"mechanism": OPACUS_SPENT, "epsilon": float(epsilon), "delta": float(delta), "accountant_steps": steps})
        return epsilon

    return noted


def _noting_local_dp(call: Any) -> Any:
    @functools.wraps(call)
    def noted(mod: Any, message: Any, context: Any, call_next: Any) -> Any:
        clean: list[list[np.ndarray]] = []

        def capturing(inner_message: Any, inner_context: Any) -> Any:
            reply = call_next(inner_message, inner_context)
            if not reply.has_error() and len(reply.content.array_records) == 1:
                clean.append(next(iter(reply.content.array_records.values())).to_numpy_ndarrays())
            return reply

        sent = _only_arrays(message)
        reply = call(mod, message, context, capturing)
        misaddressed = reply.has_error() and reply.metadata.reply_to_message_id != message.metadata.message_id
        if misaddressed and _NOTES.get() is not None:  # in an audited node's call (the class is patched for good)
            return readdressed(reply, message)
        finding = {
            "mechanism": LOCAL_DP,
            "clipping_norm": float(mod.clipping_norm),
            "sensitivity": float(mod.sensitivity),
            "epsilon": float(mod.epsilon),
            "delta": float(mod.delta),
        }
        noised = _only_arrays(reply) if not reply.has_error() else None
        if sent is not None and clean and noised is not None:
            finding |= added_noise(sent, clean[0], noised, float(mod.clipping_norm))
        note(finding)
        return reply

    return noted


def readdressed(error_reply: Any, message: Any) -> Any:
    """The error ``LocalDpMod`` returns, as the reply to the server's ``message``.

    ``LocalDpMod``, a mod of the whole ClientApp, refuses a reply without exactly one ArrayRecord (an evaluate
    reply) with an error addressed to that inner reply instead of to the server's message (Flower 1.42's
    ``_handle_err(out_msg, ...)``): the server never receives an answer and waits for its timeout. The audit
    hands the server the same error as the answer it waits for (the app's evaluation fails as it is written to, at
    once), and notes it."""
    from flwr.app import Message

    reason = str(error_reply.error.reason)
    note({"mechanism": LOCAL_DP_REFUSED, "message_type": str(message.metadata.message_type), "reason": reason})
    return Message(error_reply.error, reply_to=message)


def _only_arrays(message: Any) -> list[np.ndarray] | None:
    records = message.content.array_records
    return next(iter(records.values())).to_numpy_ndarrays() if len(records) == 1 else None


def added_noise(
    sent: list[np.ndarray], trained: list[np.ndarray], noised: list[np.ndarray], clipping_norm: float
) -> dict[str, float]:
    """The noise a clip-then-noise mechanism added: its output minus the update clipped to ``clipping_norm`` (one L2
    norm over all arrays, as Flower clips), measured as the standard deviation over every coordinate."""
    update = [np.asarray(t, np.float64) - np.asarray(s, np.float64) for s, t in zip(sent, trained, strict=True)]
    norm = float(np.sqrt(sum(float(np.sum(u * u)) for u in update)))
    scale = min(1.0, clipping_norm / norm) if norm > 0 else 1.0
    noise = np.concatenate(
        [
            (np.asarray(n, np.float64) - np.asarray(s, np.float64) - u * scale).ravel()
            for s, u, n in zip(sent, update, noised, strict=True)
        ]
    )
    return {"noise_std_measured": float(noise.std()), "update_norm": norm, "coordinates": int(noise.size)}
