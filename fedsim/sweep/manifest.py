"""What a sweep directory records: the sweep's own config (to resume it) and a manifest of its points.

``SWEEP_DIR/sweep.yaml`` is the base config (``--set`` applied) with the whole grid as a ``sweep:`` section,
labels included, so ``fedsim sweep --resume SWEEP_DIR`` expands exactly the same points.
``SWEEP_DIR/sweep.json`` lists every point: its run directory, the keys it sets, its status
(``pending``, ``running``, ``complete``, ``failed``) and, for a failure, the one-line error. It is a
record for people and reports; whether a run is finished is read from the run directory itself.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedsim.config import SWEEP_SECTION
from fedsim.core.atomic import write_json_atomic, write_text_atomic
from fedsim.rundir.layout import SWEEP_CONFIG, SWEEP_MANIFEST
from fedsim.rundir.sweep_reader import sweep_point_dir
from fedsim.sweep.grid import Axis, SweepPoint

STATUSES = ("pending", "running", "complete", "failed", "interrupted")


@dataclass
class PointRecord:
    name: str
    overrides: dict[str, Any]
    labels: dict[str, str]
    status: str = "pending"
    error: str | None = None
    seconds: float | None = None


@dataclass
class Manifest:
    """The manifest of one sweep; ``save`` rewrites it atomically after every change of status."""

    sweep_dir: Path
    axes: dict[str, list[str]]
    points: list[PointRecord] = field(default_factory=list)

    @classmethod
    def for_points(cls, sweep_dir: Path, axes: list[Axis], points: list[SweepPoint]) -> Manifest:
        return cls(
            Path(sweep_dir),
            {axis.key: [label for label, _ in axis.values] for axis in axes},
            [PointRecord(p.name, p.overrides, p.labels) for p in points],
        )

    def record(self, name: str, status: str, error: str | None = None, seconds: float | None = None) -> None:
        if status not in STATUSES:
            raise ValueError(f"status {status!r}; allowed: {', '.join(STATUSES)}")
        point = next(p for p in self.points if p.name == name)
        point.status, point.error = status, error
        if seconds is not None:
            point.seconds = round(seconds, 2)
        self.save()

    def save(self) -> None:
        payload = {
            "config": SWEEP_CONFIG,
            "grid": self.axes,
            "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "points": [
                {
                    "name": p.name,
                    "run_dir": p.name,
                    "overrides": p.overrides,
                    "labels": p.labels,
                    "status": p.status,
                    "error": p.error,
                    "seconds": p.seconds,
                }
                for p in self.points
            ],
        }
        write_json_atomic(self.sweep_dir / SWEEP_MANIFEST, payload, root=self.sweep_dir, indent=2, default=str)


def write_sweep_config(sweep_dir: Path, base: dict[str, Any], axes: list[Axis]) -> None:
    """The base config plus the grid (as label -> value mappings), enough to expand the same points again."""
    document = {**base, SWEEP_SECTION: {"grid": {axis.key: axis.as_mapping() for axis in axes}}}
    write_text_atomic(Path(sweep_dir) / SWEEP_CONFIG, yaml.safe_dump(document, sort_keys=False), root=sweep_dir)


def read_manifest(sweep_dir: Path) -> dict[str, Any]:
    path = Path(sweep_dir) / SWEEP_MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"'{sweep_dir}' is not a sweep directory (no {SWEEP_MANIFEST})")
    manifest = json.loads(path.read_text())
    for point in manifest["points"]:
        sweep_point_dir(sweep_dir, point)  # refuses a point edited to lie outside the sweep
    return manifest
