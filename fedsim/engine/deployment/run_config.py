"""An experiment as a Flower run config: what ``flwr run`` hands the ServerApp and every ClientApp.

A Flower run config holds scalars only, so the whole fedsim config travels as ONE string (its YAML, as
``dump_config`` writes it, every path made absolute by the submitter), beside a few scalars that say what
to do with it: where the run directory is, whether to continue a run, how far. ``pyproject.toml``
(``[tool.flwr.app.config]``) declares the same keys with their defaults, as ``flwr run`` requires of
every key it overrides; a test keeps both in step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedsim.config import ConfigError, ExperimentConfig, dump_config, parse_config, with_absolute_paths

FEDSIM_CONFIG = "fedsim-config"  # the experiment, as YAML ("" = every default)
RUN_DIR = "run-dir"  # absolute run directory on the ServerApp's machine ("" = output.dir/<name>-<timestamp>)
RESUME = "resume"  # a run directory to continue ("" = a new run)
ROUNDS = "rounds"  # with resume: extend the run to this many rounds (0 = as it was)
SUBMITTED_BY = "submitted-by"  # the command that submitted the run, recorded in environment.json

DEFAULTS: dict[str, str | int] = {FEDSIM_CONFIG: "", RUN_DIR: "", RESUME: "", ROUNDS: 0, SUBMITTED_BY: ""}


@dataclass(frozen=True)
class RunRequest:
    """What a run config asks of the ServerApp: a new run of ``config``, or the continuation of ``resume``."""

    config: ExperimentConfig | None  # resuming: the run's config.yaml as sent (None: not sent)
    run_dir: Path | None = None
    resume: Path | None = None
    rounds: int | None = None
    submitted_by: str = ""


def to_run_config(request: RunRequest) -> dict[str, str | int]:
    """The run config ``flwr run --run-config`` sends for ``request`` (scalars only)."""
    text = dump_config(with_absolute_paths(request.config)) if request.config is not None else ""
    return {
        FEDSIM_CONFIG: text,
        RUN_DIR: str(request.run_dir.resolve()) if request.run_dir is not None else "",
        RESUME: str(request.resume.resolve()) if request.resume is not None else "",
        ROUNDS: int(request.rounds or 0),
        SUBMITTED_BY: request.submitted_by,
    }


def experiment_config(run_config: Mapping[str, Any]) -> ExperimentConfig:
    """The experiment a run config carries (``fedsim-config``; every default when it is empty)."""
    text = run_config.get(FEDSIM_CONFIG, "")
    if not isinstance(text, str):
        raise ConfigError(
            f"run config '{FEDSIM_CONFIG}' must be the config's YAML as one string, got {type(text).__name__}"
        )
    try:
        raw = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as error:
        raise ConfigError(f"run config '{FEDSIM_CONFIG}' is not valid YAML ({error.__class__.__name__})") from None
    return parse_config(raw or {})


def from_run_config(run_config: Mapping[str, Any]) -> RunRequest:
    """Read back what ``to_run_config`` wrote."""
    unknown = sorted(set(run_config) - set(DEFAULTS))
    if unknown:
        raise ConfigError(f"run config: unknown key(s) {unknown}; allowed: {sorted(DEFAULTS)}")
    resume = str(run_config.get(RESUME, "") or "")
    rounds = int(run_config.get(ROUNDS, 0) or 0)
    if rounds < 0:
        raise ConfigError(f"run config '{ROUNDS}' = {rounds}: must be >= 0 (0 keeps the run's federation.rounds)")
    if rounds and not resume:
        raise ConfigError(f"run config '{ROUNDS}' extends a resumed run; for a new run set federation.rounds")
    run_dir = str(run_config.get(RUN_DIR, "") or "")
    has_config = bool(str(run_config.get(FEDSIM_CONFIG, "") or "").strip())
    return RunRequest(
        # a resumed run carries its config.yaml (extended to `rounds`) for the ClientApps; the ServerApp
        # reads the run's own and checks that both agree
        config=experiment_config(run_config) if has_config or not resume else None,
        run_dir=Path(run_dir) if run_dir else None,
        resume=Path(resume) if resume else None,
        rounds=rounds or None,
        submitted_by=str(run_config.get(SUBMITTED_BY, "") or ""),
    )


def client_config(run_config: Mapping[str, Any]) -> tuple[ExperimentConfig, Path]:
    """What a ClientApp needs of the run config: the experiment, and the run directory it writes its ground
    truth, error log and per-client state into (a path on the ServerApp's machine: see
    docs/how-to/deploy.md)."""
    request = from_run_config(run_config)
    run_dir = request.resume if request.resume is not None else request.run_dir
    if run_dir is None:
        raise ConfigError(
            f"run config '{RUN_DIR}' is empty: the ClientApps need the run directory the ServerApp writes"
        )
    if request.config is None:
        raise ConfigError(f"run config '{FEDSIM_CONFIG}' is empty: a resumed run must carry its config.yaml")
    return request.config, run_dir
