"""Sweeps as pandas DataFrames: a sweep directory's runs in grid order (or any folder of run directories).

``fedsim.load_sweep(path)``:

    sweep = fedsim.load_sweep("runs/defense-frontier-sweep-20261123-101500")
    sweep.points                                # one row per point: run, status, the value label of every grid key
    sweep.metrics                               # every run's rows, with `run` and the grid keys as columns

Each run is read by ``fedsim.rundir.reader.load_run``; importing this module is as light as that one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedsim.core.atomic import leaves
from fedsim.core.errors import ConfigError
from fedsim.rundir.layout import SWEEP_MANIFEST
from fedsim.rundir.reader import Run, is_run_dir, load_run

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Sweep:
    """A sweep directory (or any folder of run directories): its runs in order, and their grid labels.

    Attributes
    ----------
    path
        The sweep directory.
    runs
        Run name -> its loaded run, in grid order.
    grid
        Grid key -> value labels, in grid order (``{}`` for a plain folder of runs).
    status
        Run name -> status in the manifest (every point, including those not started).

    Examples
    --------
    >>> sweep = fedsim.load_sweep("runs/defense-frontier-sweep-20261123-101500")   # doctest: +SKIP
    >>> sweep.points                                    # one row per point: run, status, grid labels  # doctest: +SKIP
    >>> {name: run.events("eval")["accuracy"].iloc[-1] for name, run in sweep.runs.items()}  # doctest: +SKIP
    """

    path: Path
    runs: dict[str, Run]
    grid: dict[str, list[str]]  # key -> value labels, in grid order ({} for a plain folder of runs)
    status: dict[str, str]  # run -> status in the manifest (every point, including those not started)

    @property
    def points(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(
            [
                {"run": name, "status": status, **(self.runs[name].labels if name in self.runs else {})}
                for name, status in self.status.items()
            ]
        )

    @property
    def metrics(self) -> pd.DataFrame:
        import pandas as pd

        frames = [run.metrics.assign(run=name, **run.labels) for name, run in self.runs.items()]
        if not frames:
            return pd.DataFrame()
        frame = pd.concat(frames, ignore_index=True)
        first = ["run", *self.grid]
        return frame[first + [c for c in frame.columns if c not in first]]


def is_sweep_dir(path: Path) -> bool:
    return (Path(path) / SWEEP_MANIFEST).is_file()


def load_sweep(path: str | Path) -> Sweep:
    """Load a sweep directory (its points in grid order) or a plain folder of run directories (by name).

    Parameters
    ----------
    path
        The sweep directory, or a folder of run directories.

    Returns
    -------
    Sweep
        Its runs and their grid labels.

    Examples
    --------
    >>> sweep = fedsim.load_sweep("runs/defense-frontier-sweep-20261123-101500")   # doctest: +SKIP
    >>> sweep.metrics.query("event == 'eval'").groupby("run")["accuracy"].last()     # doctest: +SKIP
    """
    path = Path(path)
    if is_sweep_dir(path):
        manifest = json.loads((path / SWEEP_MANIFEST).read_text())
        status = {point["name"]: point["status"] for point in manifest["points"]}
        run_dirs = {point["name"]: sweep_point_dir(path, point) for point in manifest["points"]}
        runs = {
            point["name"]: load_run(run_dirs[point["name"]], point["labels"])
            for point in manifest["points"]
            if is_run_dir(run_dirs[point["name"]])
        }
        return Sweep(path, runs, dict(manifest.get("grid", {})), status)
    children = sorted(child for child in path.iterdir() if is_run_dir(child)) if path.is_dir() else []
    if not children:
        raise FileNotFoundError(f"'{path}' is neither a sweep directory (no {SWEEP_MANIFEST}) nor a folder of runs")
    runs = {child.name: load_run(child) for child in children}
    return Sweep(path, runs, {}, {name: "complete" if run.summary else "incomplete" for name, run in runs.items()})


def sweep_point_dir(sweep_dir: Path, point: dict[str, Any]) -> Path:
    """A manifest point's run directory; ConfigError (one line) when it lies outside the sweep directory (an
    edited ``run_dir``, ``..`` or a symlink), so a sweep never reports or resumes runs that are not its own."""
    run_dir = Path(sweep_dir) / str(point["run_dir"])
    how = leaves(sweep_dir, run_dir)
    if how is not None:
        raise ConfigError(
            f"{Path(sweep_dir) / SWEEP_MANIFEST}: point '{point['name']}' has run_dir '{point['run_dir']}': {how}; "
            "a sweep's runs lie inside its directory"
        )
    return run_dir
