"""The audited app's own working directory, inside the run directory: what the app writes (its final model, its
logs) lands beside the audit's results, never in the caller's working directory.

The app's ServerApp runs in this process and Ray starts the ClientApps' workers from it, so the change is the
process's own while the app runs; fedsim's own paths are made absolute first, so that none of them moves with it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from fedsim.config import ExperimentConfig

APP_FOLDER = "app"  # RUN_DIR/app: the app's working directory


@contextlib.contextmanager
def app_working_directory(run_dir: Path) -> Iterator[Path]:
    """Run the body in ``run_dir/app`` (made for it, and removed again if the app wrote nothing there)."""
    folder = Path(run_dir).resolve() / APP_FOLDER
    folder.mkdir(exist_ok=True)
    previous = Path.cwd()
    os.chdir(folder)
    try:
        yield folder
    finally:
        os.chdir(previous)
        with contextlib.suppress(OSError):  # only an empty folder goes
            folder.rmdir()


def with_absolute_paths(config: ExperimentConfig) -> ExperimentConfig:
    """``config`` with fedsim's relative paths (output.dir, model.path, model.checkpoint) resolved against the
    caller's working directory, which the app's run leaves for its own."""
    model_paths = {
        name: getattr(config.model, name).expanduser().resolve()
        for name in ("path", "checkpoint")
        if isinstance(getattr(config.model, name, None), Path)
    }
    output = config.output.model_copy(update={"dir": config.output.dir.expanduser().resolve()})
    return config.model_copy(update={"output": output, "model": config.model.model_copy(update=model_paths)})


def relative_paths(run_config: Mapping[str, Any]) -> list[str]:
    """One line per run config value that names a file or folder relative to here: the app, run from its own working
    directory, would look for it there (e.g. a data file given as `data-files="cifar10.parquet"`)."""
    return [
        f"run config {key} = {value!r} is relative to {Path.cwd()}, but the app runs in RUN_DIR/{APP_FOLDER}; "
        f"give it as {str(Path(value).resolve())!r}"
        for key, value in run_config.items()
        if isinstance(value, str) and value and not Path(value).is_absolute() and Path(value).exists()
    ]
