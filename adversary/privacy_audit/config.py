"""``adversary.privacy_audit``: a one-run privacy audit of the run's DP mechanism, in the run that trains and attacks.

Its level follows the mechanism: with ``strategy.dp``, or under SecAgg+ (where the server sees only the
aggregate), the audit is client level (canary clients, adjacency add/remove one client); otherwise example
level (Dirac gradient canaries in the ``host`` client's training, adjacency add/remove one example of that
client), which is what ``dpsgd`` claims, and measures the defenses that claim nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from fedsim.core.sections import Section

EXAMPLE, CLIENT = "example", "client"


class AuditConfig(Section):
    """Off by default (``adversary.privacy_audit: null``)."""

    canaries: int = Field(
        1000,
        ge=2,
        description="canaries, each included with probability 1/2 (more: a higher ceiling; with 1000 at delta 1e-5 "
        "the bound cannot exceed 5.3 by epsilon-delta, 9.8 by f-DP)",
    )
    threat_model: Literal["white-box", "final-model", "black-box"] = Field(
        "white-box",
        description="what the auditor scores: white-box = every update as sent (example level: the host's, what the "
        "mitm sees; client level: every round's aggregate); final-model = the last global model's weights; "
        "black-box (example level) = the last model's loss on mislabelled canary examples added to the host's data",
    )
    confidence: float = Field(0.95, gt=0, lt=1, description="confidence of the lower bound")
    host: int = Field(
        0, ge=0, description="(example level) partition id of the client whose training gets the canaries"
    )
    canary_norm: float | None = Field(
        None,
        gt=0,
        description="gradient norm of a canary example, or update norm of a canary client (null = the clipping bound: "
        "dpsgd.max_grad_norm or strategy.dp.clipping_norm; 1.0 where nothing clips, and for canary clients under "
        "secagg+)",
    )


def audit_level(dp: Any | None, secagg: Any | None = None) -> str:
    """Client level under ``strategy.dp`` or ``strategy.secagg`` (their sections, or None), else example level."""
    return CLIENT if dp is not None or secagg is not None else EXAMPLE


def _dpsgd(defenses: Sequence[Any]) -> Any | None:
    return next((defense for defense in defenses if defense.name == "dpsgd"), None)


def canary_norm(audit: AuditConfig, dp: Any | None, defenses: Sequence[Any], level: str = EXAMPLE) -> float:
    """A canary's norm: as configured, else the clipping bound of the mechanism audited (1.0 where none clips;
    a client-level audit without ``strategy.dp`` audits no clipping, whatever the clients' DP-SGD clips)."""
    if audit.canary_norm is not None:
        return audit.canary_norm
    if dp is not None:
        return float(dp.clipping_norm)
    dpsgd = _dpsgd(defenses) if level == EXAMPLE else None
    return float(dpsgd.max_grad_norm) if dpsgd is not None else 1.0


def gaussian_mechanism(dp: Any | None, defenses: Sequence[Any], level: str) -> bool:
    """Whether the audited mechanism claims Gaussian noise (``strategy.dp`` at client level, ``dpsgd`` at example
    level): only then is the f-DP (Gaussian) bound read as a bound on epsilon."""
    return dp is not None if level == CLIENT else _dpsgd(defenses) is not None


def audit_delta(dp: Any | None, defenses: Sequence[Any], level: str = EXAMPLE) -> float:
    """The delta of the accountant's epsilon the bound stands beside (1e-5 where nothing claims one)."""
    if dp is not None:
        return float(dp.delta)
    dpsgd = _dpsgd(defenses) if level == EXAMPLE else None
    return float(dpsgd.delta) if dpsgd is not None else 1e-5
