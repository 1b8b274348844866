"""The audit file read and ``--set`` applied, before validation: what ``fedsim.engine.app_audit.config`` validates,
and ``fedsim.engine.app_audit.preflight`` checks before torch loads."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fedsim.core.config_text import read_yaml
from fedsim.core.errors import ConfigError
from fedsim.core.overrides import apply_override
from fedsim.engine.app_audit.app import FlowerApp

RUN_CONFIG_PREFIX = "run-config:"
APP_SECTION = "app"
#: what an app audit's canaries support: mislabelled held-out images through the app's data function, scored from
#: each node's updates as sent (``fedsim.engine.app_audit.privacy_audit``); every other setting is refused in one line
PRIVACY_AUDIT_REFUSED = {
    "threat_model": "an app audit scores each node's updates as sent (white-box); leave threat_model out",
    "canary_norm": "an app audit's canaries are examples, clipped as the app clips its own; leave canary_norm out",
    "host": "an app audit gives every node its own canaries; leave host out",
}
PRIVACY_AUDIT_SECTIONS = ("privacy_audit", "audit")  # its name, and the name it had
#: what the app decides itself: an audit config that sets them would describe another federation
DECIDED_BY_THE_APP = ("data", "federation", "strategy")


class AppData(BaseModel):
    """The app's data function, as the scoring side calls it once per partition (never the attacker)."""

    model_config = ConfigDict(extra="forbid")

    function: str = Field(..., description="`module:function`, e.g. pytorchexample.task:load_data")
    arguments: dict[str, Any] = Field(default_factory=dict, description="keyword arguments (node:partition-id, ...)")
    train_output: int | None = Field(0, ge=0, description="which output is the training loader (null = the only one)")
    test_output: int | None = Field(None, ge=0, description="which output is a held-out loader (null = none)")
    image_key: str | int = Field("img", description="the images in a batch")
    label_key: str | int = Field("label", description="the labels in a batch")


class AppSection(BaseModel):
    """The ``app`` section of an audit config."""

    model_config = ConfigDict(extra="forbid")

    rounds: int = Field(..., ge=1, description="the app's number of rounds (e.g. run-config:num-server-rounds)")
    num_supernodes: int | None = Field(
        None, ge=1, description="simulated nodes (null = the app's federation's, else Flower's default)"
    )
    mean: tuple[float, ...] = Field(..., description="the channel means the app's loaders normalise with")
    std: tuple[float, ...] = Field(..., description="the channel standard deviations they normalise with")
    data: AppData


def resolve_run_config(value: Any, run_config: dict[str, Any], where: str = "") -> Any:
    """``value`` with every ``run-config:<key>`` string replaced by the app's run config value."""
    if isinstance(value, dict):
        return {
            key: resolve_run_config(item, run_config, f"{where}.{key}" if where else str(key))
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [resolve_run_config(item, run_config, f"{where}.{index}") for index, item in enumerate(value)]
    if isinstance(value, str) and value.startswith(RUN_CONFIG_PREFIX):
        key = value[len(RUN_CONFIG_PREFIX) :]
        if key not in run_config:
            raise ConfigError(
                f"{where} = {value!r}: the app's run config has no {key!r}; it has {', '.join(sorted(run_config))}"
            )
        return run_config[key]
    return value


def refuse_unsupported_privacy_audit(adversary: Any, section: AppSection) -> None:
    """One line where ``adversary.privacy_audit`` asks an app audit for what its canaries cannot do."""
    if not isinstance(adversary, dict):
        return
    for name in PRIVACY_AUDIT_SECTIONS:
        audit = adversary.get(name)
        if audit is None:
            continue
        given = audit if isinstance(audit, dict) else {}
        for key, why in PRIVACY_AUDIT_REFUSED.items():
            if key in given and not (key == "threat_model" and given[key] == "white-box"):
                raise ConfigError(f"adversary.{name}.{key} = {given[key]!r}: {why}")
        if section.data.test_output is None:
            raise ConfigError(
                f"adversary.{name}: its canaries are held-out images the nodes never train on; name the app's "
                f"held-out loader in app.data.test_output"
            )


def nodes_line(app: FlowerApp, section: AppSection) -> str:
    """How many nodes the app is simulated with and why, in one line (a wrong count fails in the app's own code)."""
    if section.num_supernodes is not None:
        return f"simulating {section.num_supernodes} nodes: the audit config's app.num_supernodes"
    return f"simulating {app.num_supernodes} nodes: {app.nodes_from}; set another count with --set app.num_supernodes=N"


def experiment_of(
    app: FlowerApp, path: Path | None, overrides: list[str] | None = None
) -> tuple[dict[str, Any], AppSection]:
    """The run's fedsim config as plain data (not validated yet) and the app section, from the audit file (or
    ``app`` defaults) and ``--set``."""
    raw = read_yaml(path) if path is not None else {}
    for assignment in overrides or []:
        apply_override(raw, assignment)
    decided = [section for section in DECIDED_BY_THE_APP if section in raw]
    if decided:
        raise ConfigError(
            f"{decided[0]}: the audited app decides its own {', '.join(decided)}; describe them in the {APP_SECTION} "
            f"section (its data function, rounds, nodes) instead"
        )
    raw = resolve_run_config(raw, app.run_config)
    try:
        section = AppSection.model_validate(raw.pop(APP_SECTION, None) or {})
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in (APP_SECTION, *first["loc"]))
        raise ConfigError(f"{field} = {first.get('input')!r}: {first['msg']}") from None
    refuse_unsupported_privacy_audit(raw.get("adversary"), section)
    nodes = section.num_supernodes or app.num_supernodes
    experiment = copy.deepcopy(raw)
    experiment.setdefault("name", f"audit-{app.name}")
    model = experiment.setdefault("model", {})
    if isinstance(model, dict):
        model.setdefault("path", str(app.path))
    experiment["data"] = {
        "dataset": "flower-app",
        "app": str(app.path),
        **section.data.model_dump(),
        "num_partitions": nodes,
        "mean": list(section.mean),
        "std": list(section.std),
    }
    experiment["federation"] = {"num_clients": nodes, "rounds": section.rounds}
    return experiment, section
