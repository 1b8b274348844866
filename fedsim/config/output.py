"""The ``output`` section: where a run directory goes and what it records."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator

from fedsim.core.sections import Section


class OutputConfig(Section):
    dir: Path = Field(Path("runs"), description="parent folder of run directories")

    @field_validator("dir")
    @classmethod
    def _a_folder(cls, value: Path) -> Path:
        if value.exists() and not value.is_dir():
            raise ValueError("is a file, not a folder")
        return value

    run_name: str | None = Field(None, description="run directory name (null = <name>-<timestamp>)")
    save_checkpoints: bool = Field(
        True, description="keep every round's global model (the latest is always kept, for --resume)"
    )
    ground_truth: bool = Field(True, description="record which samples each client trained on, per round")

    @field_validator("run_name")
    @classmethod
    def _safe_name(cls, value: str | None) -> str | None:
        return None if value is None else directory_name(value)


def directory_name(value: str) -> str:
    """``value`` if it names one folder inside ``output.dir`` (no separator, no ``..``), else a ValueError."""
    if not re.fullmatch(r"[A-Za-z0-9._-]+", value) or set(value) == {"."}:
        raise ValueError(f"'{value}' may only contain letters, digits, '.', '_' and '-' (and not be only dots)")
    return value
