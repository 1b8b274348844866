"""The DP an audited app uses, found from what it does, recorded in the run and checked against its own claims.

Found where it acts: Opacus' PrivacyEngine and Flower's ``LocalDpMod`` in each node's process
(``fedsim.engine.app_audit.client_probe``), Flower's DP strategy wrappers where the app's server starts its strategy
(``fedsim.engine.app_audit.server_watch``), and ``LocalDpMod`` among the ClientApp's mods before the run, so that the
attacks adapt to it. Each finding becomes an ``app_dp`` row (round, client, mechanism, its parameters); the app's own
epsilon claims are the fields of its fit rows named like ``epsilon``.

The check: ``LocalDpMod`` computes its noise from a sensitivity the app states; what bounds the update is its
clipping norm. The noise measured on the update it sent, at that clipping norm, supports the epsilon of the Gaussian
mechanism's formula that ``LocalDpMod`` itself uses, epsilon = C * sqrt(2 ln(1.25 / delta)) / sigma; where that is
ten or more times the epsilon the app states, one loud line says so.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fedsim.core.flower_private import client_app_mods
from fedsim.engine.app_audit.client_probe import CANARIES_ENTERED, LOCAL_DP, LOCAL_DP_REFUSED, OPACUS, OPACUS_SPENT
from fedsim.engine.app_audit.notes import Notes

DP_EVENT = "app_dp"
#: a claim the measured noise contradicts by this factor or more is flagged
CONTRADICTION_FACTOR = 10.0
#: Flower's DP strategy wrappers (Message API), by class name: (where the clipping happens, how)
SERVER_WRAPPERS = {
    "DifferentialPrivacyServerSideFixedClipping": "server",
    "DifferentialPrivacyServerSideAdaptiveClipping": "server",
    "DifferentialPrivacyClientSideFixedClipping": "client",
    "DifferentialPrivacyClientSideAdaptiveClipping": "client",
}
#: the wrapper whose clients clip their updates to a fixed, public norm (``fixedclipping_mod``): what the wire carries
CLIENT_SIDE_FIXED = "DifferentialPrivacyClientSideFixedClipping"


def gaussian_noise_std(sensitivity: float, epsilon: float, delta: float) -> float:
    """The noise standard deviation of the Gaussian mechanism's classic formula (what ``LocalDpMod`` adds)."""
    return sensitivity * math.sqrt(2 * math.log(1.25 / delta)) / epsilon


def supported_epsilon(clipping_norm: float, noise_std: float, delta: float) -> float:
    """The epsilon that noise of ``noise_std`` supports on an update clipped to ``clipping_norm`` (same formula)."""
    return math.inf if noise_std <= 0 else clipping_norm * math.sqrt(2 * math.log(1.25 / delta)) / noise_std


def mods_found(client_app: Any) -> list[dict[str, Any]]:
    """The ClientApp's ``LocalDpMod``s, as findings (read from the app object before it runs)."""
    from flwr.client.mod import LocalDpMod as LegacyLocalDpMod
    from flwr.clientapp.mod import LocalDpMod

    return [
        {
            "mechanism": LOCAL_DP,
            "clipping_norm": float(mod.clipping_norm),
            "sensitivity": float(mod.sensitivity),
            "epsilon": float(mod.epsilon),
            "delta": float(mod.delta),
        }
        for mod in client_app_mods(client_app)
        if isinstance(mod, LocalDpMod | LegacyLocalDpMod)
    ]


def as_defenses(findings: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """fedsim's client defenses with the public options of what was found: the adaptive attacks' knowledge."""
    defenses: list[dict[str, Any]] = []
    for finding in findings:
        if finding["mechanism"] == LOCAL_DP:
            sigma = gaussian_noise_std(finding["sensitivity"], finding["epsilon"], finding["delta"])
            defenses.append({"name": "clip", "max_norm": finding["clipping_norm"]})
            if sigma > 0:
                defenses.append({"name": "noise", "sigma": sigma})
        elif finding["mechanism"] == CLIENT_SIDE_FIXED and isinstance(finding.get("clipping_norm"), int | float):
            defenses.append({"name": "clip", "max_norm": float(finding["clipping_norm"])})  # the clients clip
        elif finding["mechanism"] == OPACUS and isinstance(finding["max_grad_norm"], float):
            defenses.append(
                {
                    "name": "dpsgd",
                    "noise_multiplier": finding["noise_multiplier"],
                    "max_grad_norm": finding["max_grad_norm"],
                }
            )
    unique = {json.dumps(defense, sort_keys=True): defense for defense in defenses}
    return list(unique.values())


def strategy_found(strategy: Any) -> dict[str, Any] | None:
    """A Flower DP strategy wrapper as a finding (None for any other strategy)."""
    name = type(strategy).__name__
    if name not in SERVER_WRAPPERS:
        return None
    finding: dict[str, Any] = {"mechanism": name, "clipping_at": SERVER_WRAPPERS[name]}
    for attribute in ("noise_multiplier", "clipping_norm", "initial_clipping_norm", "num_sampled_clients"):
        value = getattr(strategy, attribute, None)
        if isinstance(value, int | float):
            finding[attribute] = value
    return finding


def strategy_spent(strategy: Any) -> dict[str, float] | None:
    """The epsilon and delta a DP wrapper's own accountant reports (None without one)."""
    spent_of = getattr(strategy, "privacy_spent", None)
    spent = spent_of() if callable(spent_of) else None
    if spent is None:
        return None
    return {"claimed_epsilon_client": float(spent.epsilon), "claimed_delta_client": float(spent.delta)}


def finding_rows(calls: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Probed calls' findings as ``app_dp`` rows' fields (round, client, mechanism, parameters)."""
    rows = [
        {"round": call["round"] or 0, "client": call["client"], **finding}
        for call in calls
        for finding in call.get("findings", [])
    ]
    return sorted(rows, key=lambda row: (row["round"], row["client"]))


def read_notes(notes_dir: Path) -> list[dict[str, Any]]:
    """Every probed call's findings in ``notes_dir``, as ``app_dp`` rows' fields."""
    notes = Notes(notes_dir)
    return finding_rows(notes.refresh())


def local_dp_contradiction(row: Mapping[str, Any]) -> str | None:
    """One line where the noise measured on a ``LocalDpMod`` update supports a far larger epsilon than it states."""
    if row.get("mechanism") != LOCAL_DP or "noise_std_measured" not in row:
        return None
    supported = supported_epsilon(row["clipping_norm"], row["noise_std_measured"], row["delta"])
    if supported < CONTRADICTION_FACTOR * row["epsilon"]:
        return None
    return (
        f"LocalDpMod's claim contradicted: client {row['client']}, round {row['round']}: the noise measured on its "
        f"update (std {row['noise_std_measured']:.3g} over {row['coordinates']} coordinates) supports epsilon "
        f"{supported:.3g} at its clipping norm {row['clipping_norm']:g} (delta {row['delta']:g}, the Gaussian "
        f"mechanism's formula it uses), not the {row['epsilon']:g} it states: its sensitivity {row['sensitivity']:g} "
        f"is below the clipping norm that bounds the update"
    )


def refusal_line(row: Mapping[str, Any]) -> str | None:
    """One line where ``LocalDpMod`` refused a reply of the app (its evaluate replies carry no ArrayRecord)."""
    if row.get("mechanism") != LOCAL_DP_REFUSED:
        return None
    return (
        f"LocalDpMod refused the app's {row['message_type']} reply on client {row['client']} ({row['reason']}): the "
        f"app's {row['message_type']} fails on every node; under `flwr run` the server would wait for its timeout, "
        f"since Flower addresses that error to the app's reply, not to the server's message (the audit hands it to "
        f"the server); apply LocalDpMod to training alone (@app.train(mods=[...])) or evaluate on no client"
    )


def epsilon_claims(rows: Iterable[Mapping[str, Any]]) -> dict[int, dict[str, float]]:
    """Per client, the last value of each number its train replies named like ``epsilon`` (the app's own claim)."""
    claims: dict[int, dict[str, float]] = {}
    for row in rows:
        if row.get("event") != "fit" or row.get("client") is None:
            continue
        for key, value in row.items():
            if "epsilon" in key.lower() and isinstance(value, int | float):
                claims.setdefault(int(row["client"]), {})[key] = float(value)
    return claims


def dp_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``summary.json`` says of the app's DP: each mechanism found with its parameters per client, the app's
    own epsilon claims per client (its train metrics, and what it last asked Opacus' accountant, with the delta and
    the steps that accountant saw), and the claims the measured noise contradicts."""
    found = [row for row in rows if row.get("event") == DP_EVENT]
    mechanisms: dict[str, dict[str, Any]] = {}
    accountant: dict[str, dict[str, Any]] = {}  # what the app last asked Opacus' accountant, per client
    for row in found:
        if row["mechanism"] == OPACUS_SPENT:
            accountant[str(row["client"])] = {k: row[k] for k in ("epsilon", "delta", "accountant_steps") if k in row}
            continue
        if row["mechanism"] in (LOCAL_DP_REFUSED, CANARIES_ENTERED):
            continue  # not settings: the replies LocalDpMod refused (``refusal_line``), the audit's own canaries
        parameters = {
            k: v for k, v in row.items() if k not in ("round", "event", "client", "mechanism", "schema", "time")
        }
        entry = mechanisms.setdefault(row["mechanism"], {})
        entry[str(row.get("client", "server"))] = parameters
    return {
        "mechanisms": mechanisms,
        "epsilon_claims": {str(client): claim for client, claim in epsilon_claims(rows).items()},
        "opacus_accountant": accountant,
        "local_dp_refused": sum(1 for row in found if row["mechanism"] == LOCAL_DP_REFUSED),
        "contradicted": [line for row in found if (line := local_dp_contradiction(row)) is not None],
    }


def noise_of(defense: Mapping[str, Any]) -> float:
    """The noise a defense adds, in its own units (0 for one that adds none)."""
    return float(defense.get("noise_multiplier", defense.get("sigma", 0.0)))


def most_exposed(defenses: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per defense name, the settings with the least noise (the node most exposed), the first of equals."""
    kept: dict[str, dict[str, Any]] = {}
    for defense in defenses:
        if defense["name"] not in kept or noise_of(defense) < noise_of(kept[defense["name"]]):
            kept[defense["name"]] = defense
    return kept


def unadapted_line(found: Iterable[Mapping[str, Any]], declared: Iterable[str]) -> str | None:
    """One line where the app trains with DP the attacks were not adapted to (found while it ran, missed by the dry
    call before it), with the ``--set`` that adapts them."""
    missing = [defense for name, defense in most_exposed(as_defenses(found)).items() if name not in set(declared)]
    if not missing:
        return None
    listed = ", ".join(
        "{" + ", ".join(f"{k}: {v:g}" if isinstance(v, float) else f"{k}: {v}" for k, v in d.items()) + "}"
        for d in missing
    )
    return (
        f"warning: the app trains with DP the attacks did not know ({', '.join(d['name'] for d in missing)}): their "
        f"leakage is a lower bound; rerun with --set 'client.defenses=[{listed}]' for the adapted attacks"
    )
