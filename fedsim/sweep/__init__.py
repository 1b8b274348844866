"""`fedsim sweep`: the cartesian product of config values, run as separate runs under one sweep directory.

    SWEEP_DIR/
      sweep.yaml      the base config and its grid (``fedsim sweep --resume SWEEP_DIR`` re-reads it)
      sweep.json      every point: run directory, the keys it sets, status, error
      sweep.lock      held by the one process running the sweep (a second one is refused, naming it)
      <point>/        one ordinary run directory per point (``fedsim report``, ``fedsim.load_run``)

These names, and those of a run directory, are spelled once, in ``fedsim.rundir.layout``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedsim.config import SWEEP_SECTION, ConfigError, ExperimentConfig, apply_override, read_yaml
from fedsim.core.stopping import StopSignal, force_exit, stop_on_signals
from fedsim.rundir.layout import SWEEP_CONFIG, SWEEP_LOCK_FILE, SWEEP_MANIFEST, timestamped_sweep_dir
from fedsim.rundir.lock import RunLock
from fedsim.sweep.execute import PointOutcome, available_cpus, run_points, schedule
from fedsim.sweep.grid import Axis, SweepPoint, axes_from_spec, expand, merge_axes, parse_grid_arg, parse_spec
from fedsim.sweep.manifest import Manifest, read_manifest, write_sweep_config

__all__ = [
    "SWEEP_CONFIG",
    "SWEEP_MANIFEST",
    "PointOutcome",
    "SweepPlan",
    "SweepPoint",
    "available_cpus",
    "plan_sweep",
    "read_manifest",
    "run_sweep",
]


@dataclass(frozen=True)
class SweepPlan:
    """A validated sweep: where it goes, its base config, its axes and every point's config."""

    sweep_dir: Path
    base: dict[str, Any]
    axes: list[Axis]
    points: list[SweepPoint]


def plan_sweep(
    config: Path | None = None,
    *,
    overrides: list[str] | None = None,
    grid: list[str] | None = None,
    out: Path | None = None,
    resume: Path | None = None,
) -> SweepPlan:
    """Read the config (or a sweep to resume), build the grid and validate every point; nothing is written.

    ``grid`` entries (``key=v1,v2``) add to the config's ``sweep.grid``, replacing the axes they overlap
    (see grid.merge_axes).
    """
    if resume is not None:
        if config is not None or overrides or grid or out is not None:
            raise ConfigError(
                "sweep --resume continues a sweep with its own saved grid; drop CONFIG, --set, --grid and --out"
            )
        if not (Path(resume) / SWEEP_CONFIG).is_file():
            raise FileNotFoundError(f"--resume {resume}: not a sweep directory (no {SWEEP_CONFIG})")
        config, out = Path(resume) / SWEEP_CONFIG, Path(resume)
    if config is None:
        raise ConfigError(
            "sweep: give a CONFIG file with --grid KEY=V1,V2 (or a `sweep:` section), or --resume SWEEP_DIR"
        )
    raw = read_yaml(config)
    spec = raw.pop(SWEEP_SECTION, None)
    for assignment in overrides or []:
        apply_override(raw, assignment)
    config_axes = axes_from_spec(parse_spec(spec, str(config))) if spec is not None else []
    axes = merge_axes(config_axes, [parse_grid_arg(entry) for entry in grid or []])
    if out is None:
        out = default_sweep_dir(raw)
    return SweepPlan(Path(out), raw, axes, expand(raw, axes, Path(out)))


def default_sweep_dir(raw: dict[str, Any]) -> Path:
    """``output.dir/<name>-sweep-<timestamp>``, read from the raw base (which may need the grid to be valid)."""
    output = raw.get("output")
    if not isinstance(output, dict):
        output = {}
    parent = output.get("dir") or ExperimentConfig.model_fields["output"].get_default(call_default_factory=True).dir
    name = raw.get("name") or ExperimentConfig.model_fields["name"].default
    return Path(str(parent)) / timestamped_sweep_dir(name)


def refuse_to_drop_points(plan: SweepPlan) -> None:
    """Refuse a plan for a sweep directory that already lists points this plan lacks, and whose run directories
    are there: the rewritten manifest would no longer list them, so their runs would drop out of the sweep's
    tables (a changed grid renames points too: they carry their index)."""
    if not (plan.sweep_dir / SWEEP_MANIFEST).is_file():
        return
    planned = {point.name for point in plan.points}
    kept = [point["name"] for point in read_manifest(plan.sweep_dir)["points"]]
    dropped = [name for name in kept if name not in planned and (plan.sweep_dir / name).exists()]
    if dropped:
        more = f" and {len(dropped) - 2} more" if len(dropped) > 2 else ""
        raise ConfigError(
            f"sweep: {plan.sweep_dir} already holds a sweep with point(s) this plan lacks ({', '.join(dropped[:2])}"
            f"{more}): continue it with `fedsim sweep --resume {plan.sweep_dir}`, or give another --out"
        )


def run_sweep(
    plan: SweepPlan, *, parallel: int = 1, cpus: int | None = None, quiet: bool = False
) -> list[PointOutcome]:
    """Run the points of a plan that are not complete yet (see fedsim.sweep.execute); returns their outcomes."""
    refuse_to_drop_points(plan)
    schedule(plan.sweep_dir, plan.points, parallel, cpus)  # may refuse; nothing written yet
    plan.sweep_dir.mkdir(parents=True, exist_ok=True)
    # one process runs a sweep directory at a time: a second `sweep --resume` is refused in one line naming the
    # first, rather than running the same points and marking complete ones failed (fedsim.rundir.lock)
    lock = RunLock.acquire(plan.sweep_dir, "sweep", name=SWEEP_LOCK_FILE, rule="one process runs a sweep at a time")
    try:
        decided = schedule(plan.sweep_dir, plan.points, parallel, cpus)  # again, now that no other sweep runs it
        write_sweep_config(plan.sweep_dir, plan.base, plan.axes)
        manifest = Manifest.for_points(plan.sweep_dir, plan.axes, plan.points)
        # SIGINT / SIGTERM stop the point(s) running without committing their round in progress, then the sweep
        with stop_on_signals(StopSignal(), force_exit) as stop:
            return run_points(plan.sweep_dir, plan.points, manifest, decided, parallel=parallel, quiet=quiet, stop=stop)
    finally:
        lock.release()
