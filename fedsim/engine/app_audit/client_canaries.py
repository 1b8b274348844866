"""``adversary.privacy_audit`` at client level on an audited app: canary clients passed through the app's own DP
object, ``LocalDpMod`` among its ClientApp's mods or the ``DifferentialPrivacyServerSideFixedClipping`` wrapping its
strategy, and a lower bound on that mechanism's client-level epsilon beside the epsilon it stands for.

Canary client j (Andrew et al., ICLR 2024) has the update ``C * u_j``: ``u_j`` a random unit direction over the
model's arrays, ``C`` the mechanism's clipping norm (clipping leaves it whole: the worst case the mechanism must
hide). Each canary is included with probability 1/2 (Steinke, Nasr and Jagielski 2023); an excluded canary's update
is the zero update, the client absent (``ABSENT``: 1e-9 of the clipping norm, since Flower's clipping divides by
an update's norm). Each canary's update is released once through the app's own object, as the
app configured it, with the randomness of its own seed:

* ``LocalDpMod``: the mod called on a train message carrying the global model (zeros), the ClientApp's reply
  being the canary's update; released: the update the mod returns (clipped, noised).
* the server-side wrapper: a copy of the app's wrapper aggregating the canary's reply beside ``num_sampled_clients
  - 1`` replies of the zero update (equal weights, as the wrapper requires); released: the noised aggregate.

The auditor scores each canary by the released update's projection on ``u_j``; it never sees which were included.
The adjacency is **client level, one release: one client's update present (at the clipping norm) or absent (the zero
update in its place; for the wrapper, with its fixed denominator)**. Beside the bound: the epsilon the mechanism
stands for in one release: what ``LocalDpMod`` states (at its delta), or, for the wrapper, the Gaussian mechanism's
epsilon at its noise multiplier (``1/z``-GDP at delta 1e-5). What is measured is the mechanism the app configured, on
the worst-case update, one release at a time; not the federation's training, which composes its rounds.

Flower's DP draws from NumPy's global generator: it is seeded per canary here and restored after, so the app's run,
which runs before in its own processes, is untouched; Flower's log, which says each clip and each noise draw, is held
back meanwhile.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from adversary.privacy_audit.auditor import audit_fields, audit_result_text, audit_warning, canary_text
from adversary.privacy_audit.bound import audit_guesses
from adversary.privacy_audit.canaries import CanaryClients
from adversary.privacy_audit.config import CLIENT, AuditConfig
from adversary.privacy_audit.fdp import gdp_epsilon
from fedsim.core.flower_private import give_message_id, task_identity
from fedsim.core.seeding import derive_seed
from fedsim.core.wire import NUM_EXAMPLES

logger = logging.getLogger("fedsim")

SERVER_FIXED = "DifferentialPrivacyServerSideFixedClipping"
WRAPPER_DELTA = 1e-5  # the wrapper states no epsilon for one release: its noise multiplier's, at this delta
THREAT_MODEL = "white-box"
#: an absent client's update, as a fraction of the clipping norm: Flower's clipping divides by an update's norm, so an
#: exactly zero update cannot pass through it; this one moves a canary's score by 1e-9 of a present one's
ABSENT = 1e-9
#: Flower's DP wrappers a canary client cannot pass through here, with why
NOT_AUDITED = {
    "DifferentialPrivacyServerSideAdaptiveClipping": "its clipping norm follows the clients' updates round by round",
    "DifferentialPrivacyClientSideFixedClipping": "its clients clip in their own mod, and the noise is the server's",
    "DifferentialPrivacyClientSideAdaptiveClipping": "its clipping norm follows the clients' updates round by round",
}

Release = Callable[[list[np.ndarray]], list[np.ndarray]]


@dataclass(frozen=True)
class ClientMechanism:
    """The app's DP object as one client's release: ``release`` maps an update to what the mechanism releases."""

    name: str
    clipping_norm: float
    claimed: float | None  # the epsilon it stands for in one release
    claim: str  # what that epsilon is, in words
    delta: float
    release: Release
    layout: Mapping[str, tuple[int, ...]]  # the model's arrays, by name: what an update is cut into


def _zeros(layout: Mapping[str, tuple[int, ...]]) -> list[np.ndarray]:
    return [np.zeros(shape, dtype=np.float32) for shape in layout.values()]


def _absent(layout: Mapping[str, tuple[int, ...]], clipping_norm: float) -> list[np.ndarray]:
    """A client that adds (next to) nothing: an update of ``ABSENT`` times the clipping norm on one coordinate."""
    arrays = _zeros(layout)
    arrays[0].reshape(-1)[0] = ABSENT * clipping_norm
    return arrays


def _record(layout: Mapping[str, tuple[int, ...]], arrays: list[np.ndarray]) -> Any:
    from flwr.app import Array, ArrayRecord

    return ArrayRecord({name: Array(np.asarray(a, np.float32)) for name, a in zip(layout, arrays, strict=True)})


def _instruction(layout: Mapping[str, tuple[int, ...]]) -> Any:
    from flwr.app import Message, MessageType, RecordDict

    message = Message(RecordDict({"arrays": _record(layout, _zeros(layout))}), 1, MessageType.TRAIN)
    give_message_id(message, "audit-canary")
    return message


def _reply(message: Any, layout: Mapping[str, tuple[int, ...]], update: list[np.ndarray]) -> Any:
    from flwr.app import Message, MetricRecord, RecordDict

    content = RecordDict({"arrays": _record(layout, update), "metrics": MetricRecord({NUM_EXAMPLES: 1})})
    return Message(content, reply_to=message)


def local_dp_mechanism(mod: Any, layout: Mapping[str, tuple[int, ...]]) -> ClientMechanism:
    """The app's ``LocalDpMod`` as one client's release."""
    from flwr.app import Context, RecordDict

    def release(update: list[np.ndarray]) -> list[np.ndarray]:
        message = _instruction(layout)
        context = Context(1, 1, {}, RecordDict(), {})
        reply = mod(message, context, lambda msg, ctxt: _reply(msg, layout, update))
        return next(iter(reply.content.array_records.values())).to_numpy_ndarrays()

    claim = f"the epsilon LocalDpMod states (at its delta {float(mod.delta):g}, sensitivity {float(mod.sensitivity):g})"
    clip, epsilon, delta = float(mod.clipping_norm), float(mod.epsilon), float(mod.delta)
    return ClientMechanism("flower-localdp", clip, epsilon, claim, delta, release, layout)


def server_mechanism(strategy: Any, layout: Mapping[str, tuple[int, ...]]) -> ClientMechanism:
    """The app's ``DifferentialPrivacyServerSideFixedClipping`` as the release of one client among its sampled."""
    sampled = int(strategy.num_sampled_clients)
    multiplier = float(strategy.noise_multiplier)

    def release(update: list[np.ndarray]) -> list[np.ndarray]:
        wrapper = copy.deepcopy(strategy)  # the app's own stays as the run left it
        wrapper.current_arrays = _record(layout, _zeros(layout))
        message = _instruction(layout)
        absent = _absent(layout, float(strategy.clipping_norm))
        replies = [_reply(message, layout, update)] + [_reply(message, layout, absent) for _ in range(sampled - 1)]
        arrays, _ = wrapper.aggregate_train(1, replies)
        return arrays.to_numpy_ndarrays()

    claimed = gdp_epsilon(1.0 / multiplier, WRAPPER_DELTA) if multiplier > 0 else float("inf")
    claim = (
        f"the Gaussian mechanism's epsilon at its noise multiplier {multiplier:g} (1/z-GDP, delta {WRAPPER_DELTA:g})"
    )
    return ClientMechanism(SERVER_FIXED, float(strategy.clipping_norm), claimed, claim, WRAPPER_DELTA, release, layout)


def canary_scores(mechanism: ClientMechanism, canaries: CanaryClients, seed: int) -> np.ndarray:
    """Each canary's released update projected on its direction (NumPy's global generator restored after)."""
    sizes = [int(np.prod(shape)) for shape in mechanism.layout.values()]
    state = np.random.get_state()
    scores = np.empty(len(canaries.included))
    flower = logging.getLogger("flwr")
    level = flower.level
    flower.setLevel(logging.ERROR)  # Flower logs each clip and each noise draw: thousands of lines
    try:
        with task_identity(1):
            for j, included in enumerate(canaries.included):
                direction = canaries.direction(j).numpy()
                update = mechanism.clipping_norm * direction * (1.0 if included else ABSENT)
                pieces = np.split(update, np.cumsum(sizes)[:-1])
                arrays = [piece.reshape(shape) for piece, shape in zip(pieces, mechanism.layout.values(), strict=True)]
                np.random.seed(derive_seed(seed, "client-canary", j) % 2**32)
                released = np.concatenate([np.ravel(a) for a in mechanism.release(arrays)]).astype(np.float64)
                scores[j] = float(released @ direction)
    finally:
        flower.setLevel(level)
        np.random.set_state(state)
    return scores


def client_level_fields(mechanism: ClientMechanism, audit: AuditConfig, seed: int) -> dict[str, Any]:
    """The mechanism's client-level bound as an ``app_privacy_audit`` row's fields, beside the epsilon it stands for."""
    dimension = sum(int(np.prod(shape)) for shape in mechanism.layout.values())
    canaries = CanaryClients.draw(audit.canaries, dimension, mechanism.clipping_norm, derive_seed(seed, "app-client"))
    scores = canary_scores(mechanism, canaries, derive_seed(seed, "app-client-noise"))
    result = audit_guesses(scores, canaries.included, delta=mechanism.delta, confidence=audit.confidence)
    fields = audit_fields(result, CLIENT, THREAT_MODEL, mechanism.claimed, canary_norm=mechanism.clipping_norm)
    kind = "mod" if mechanism.name == "flower-localdp" else "strategy wrapper"
    return {
        **fields,
        "mechanism": mechanism.name,
        "audit_model": f"the app's own {mechanism.name} on canary clients' updates, one release each",
        "audit_canary_kind": f"canary clients (a random direction at the clipping norm) through the app's own {kind}",
        "claim": mechanism.claim,
    }


def client_level_line(fields: Mapping[str, Any]) -> str:
    """The bound beside the epsilon the mechanism stands for, in one line."""
    claimed = fields.get("epsilon_client")
    beside = "no epsilon it stands for" if claimed is None else f"{fields['claim']}: {claimed:.3g}"
    return (
        f"privacy audit, {fields['mechanism']} (client level, one release: one client's update present at the "
        f"clipping norm or absent; {canary_text(fields)} through the app's own object): {audit_result_text(fields)}; "
        f"beside {beside}"
    )


def client_level_contradiction(fields: Mapping[str, Any]) -> str | None:
    """The loud line where the bound exceeds the epsilon the mechanism stands for (None otherwise)."""
    warning = audit_warning(fields)
    return None if warning is None else f"the app's {fields['mechanism']} claim is contradicted: {warning}"


def client_level_audits(
    audit: AuditConfig, seed: int, mods: list[Any], strategies: list[Any], layout: Mapping[str, tuple[int, ...]]
) -> list[dict[str, Any]]:
    """A client-level bound for each ``LocalDpMod`` among ``mods`` and each server-side fixed-clipping wrapper among
    ``strategies``, each said in one line (a contradicted claim in one loud line); a wrapper no canary client can
    pass through here is said in one line."""
    from flwr.client.mod import LocalDpMod as LegacyLocalDpMod
    from flwr.clientapp.mod import LocalDpMod

    mechanisms = [local_dp_mechanism(mod, layout) for mod in mods if isinstance(mod, LocalDpMod | LegacyLocalDpMod)]
    for strategy in strategies:
        name = type(strategy).__name__
        if name == SERVER_FIXED:
            mechanisms.append(server_mechanism(strategy, layout))
        elif name in NOT_AUDITED:
            logger.warning("privacy audit: no client-level bound for the app's %s: %s", name, NOT_AUDITED[name])
    rows = []
    for mechanism in mechanisms:
        fields = client_level_fields(mechanism, audit, seed)
        rows.append(fields)
        logger.info(client_level_line(fields))
        line = client_level_contradiction(fields)
        if line is not None:
            logger.warning(line)
    return rows


@dataclass(frozen=True)
class ClientLevelAudit:
    """What the client-level audit needs once the run is over: the audit's settings and seed, the ClientApp's mods,
    the model's arrays by name."""

    audit: AuditConfig
    seed: int
    mods: list[Any]
    layout: Mapping[str, tuple[int, ...]]

    def run(self, strategies: list[Any]) -> list[dict[str, Any]]:
        """The bounds for the mods and for ``strategies``, the DP wrappers the app's server started."""
        return client_level_audits(self.audit, self.seed, self.mods, strategies, self.layout)
