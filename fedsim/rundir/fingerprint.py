"""``fingerprint.json``: the config a run started with, the fedsim version, and whether it keeps a commit record.

``--resume`` compares the run's ``config.yaml`` with the config recorded here (an edited config is refused)
and the version with the running one. ``integrity_record`` names the commit record (``commits.jsonl``) when
the run was written with one: a resume then refuses to go on without it, so that deleting or emptying the
record cannot switch its checks off. Runs written before the field existed have none, and are checked against
their record only where it is there.
"""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from fedsim.core.atomic import write_json_atomic
from fedsim.core.errors import ConfigError, first_line
from fedsim.rundir.layout import COMMITS_FILE, FINGERPRINT_FILE

INTEGRITY_RECORD = "integrity_record"


def fedsim_version() -> str:
    try:
        return metadata.version("fedsim")
    except metadata.PackageNotFoundError:
        return "unknown"


def write_fingerprint(run_dir: Path, config_text: str, *, with_record: bool = True) -> None:
    """Record ``config_text`` (the resolved config as config.yaml holds it), its hash and this fedsim's version;
    ``with_record``: the run keeps ``commits.jsonl`` (every run fedsim starts now does)."""
    fingerprint = {
        "fedsim": fedsim_version(),
        "config_sha256": hashlib.sha256(config_text.encode()).hexdigest(),
        "config": config_text,
    }
    if with_record:
        fingerprint[INTEGRITY_RECORD] = COMMITS_FILE
    write_json_atomic(Path(run_dir) / FINGERPRINT_FILE, fingerprint, durable=True, root=run_dir, indent=1)


def keeps_integrity_record(recorded: dict[str, Any] | None) -> bool:
    """Whether the run's fingerprint says it was written with ``commits.jsonl``."""
    return recorded is not None and recorded.get(INTEGRITY_RECORD) == COMMITS_FILE


def read_fingerprint(run_dir: Path, what: str) -> dict[str, Any] | None:
    """fingerprint.json's record (None when the run has none), or one line starting with ``what`` naming the file
    when it is damaged."""
    path = Path(run_dir) / FINGERPRINT_FILE
    if not path.is_file():
        return None

    def damaged(reason: str) -> ConfigError:
        return ConfigError(
            f"{what}: '{path}' is damaged ({reason}); it records the config and fedsim version the run started with: "
            "restore it from a copy of the run"
        )

    try:
        recorded = json.loads(path.read_bytes())
    except ValueError as error:  # JSONDecodeError, or bytes that are no text at all (UnicodeDecodeError)
        raise damaged(f"not JSON: {first_line(error)}") from None
    if not isinstance(recorded, dict):
        raise damaged(f"not a JSON object but a {type(recorded).__name__}")
    for key in ("fedsim", "config"):
        if key not in recorded:
            raise damaged(f"no '{key}'")
        if not isinstance(recorded[key], str):
            raise damaged(f"'{key}' is not a string")
    if recorded.get(INTEGRITY_RECORD, COMMITS_FILE) != COMMITS_FILE:
        raise damaged(f"'{INTEGRITY_RECORD}' is not '{COMMITS_FILE}'")
    try:
        config = yaml.safe_load(recorded["config"])
    except yaml.YAMLError:
        config = None
    if not isinstance(config, dict):
        raise damaged("its 'config' is not a YAML mapping")
    return recorded
