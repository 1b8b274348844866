"""fedsim: measure how much private training data leaks out of federated learning.

From Python, in the pandas way:

    import fedsim

    run = fedsim.run("configs/quickstart.yaml", overrides=["federation.rounds=3"])
    run.events("eval")[["round", "accuracy"]]      # one row per evaluated round
    run.images()                                   # one row per reconstructed image, with its scores
    run.privacy()                                  # epsilon_example / epsilon_client spent by each round

    run = fedsim.audit("path/to/flower-app", "audit.yaml", run_config='data-files="cifar10.parquet"')
    run.events("app_dp")                           # the DP the app was found using, per client and round

    run = fedsim.load_run("runs/quickstart-20261122-101500")   # a run that already ran
    sweep = fedsim.load_sweep("runs/defense-frontier-sweep-20261123-101500")

Importing ``fedsim`` is light: torch, Flower and Ray are imported when a run starts, pandas when one is
loaded, so that the command line starts in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedsim.rundir.reader import Run, load_run
from fedsim.rundir.sweep_reader import Sweep, load_sweep

if TYPE_CHECKING:
    from fedsim.config import ExperimentConfig

__version__ = "0.1.0"
__all__ = ["Run", "Sweep", "audit", "load_run", "load_sweep", "run"]


def run(
    config: str | Path | Mapping[str, Any] | ExperimentConfig,
    overrides: Sequence[str] = (),
    *,
    quiet: bool = False,
) -> Run:
    """Run one experiment, exactly as ``fedsim run CONFIG --set KEY=VALUE ...`` does, and return it loaded.

    The run writes its directory under ``output.dir`` as the command does; the returned ``Run`` reads it
    (``Run.path``), as ``fedsim.load_run`` would.

    Parameters
    ----------
    config
        A YAML file, the config's sections as a dict, or an ``ExperimentConfig``.
    overrides
        ``KEY=VALUE`` strings, as the command line's ``--set`` (``"client.lr=0.05"``).
    quiet
        Log lines only, no live display.

    Returns
    -------
    Run
        The finished run.

    Raises
    ------
    fedsim.core.errors.ConfigError
        A bad config, with the command line's one-line message, before anything runs.

    Examples
    --------
    >>> run = fedsim.run("configs/quickstart.yaml", overrides=["federation.rounds=2"])  # doctest: +SKIP
    >>> run.events("eval")[["round", "accuracy"]]                                       # doctest: +SKIP
       round  accuracy
    0      0  0.103333
    1      1  0.296667
    2      2  0.473333
    >>> fedsim.run({"federation": {"rounds": 2}, "data": {"dataset": "digits"}})      # doctest: +SKIP
    """
    from fedsim.config import load_config
    from fedsim.engine.run import run_experiment

    assignments = [overrides] if isinstance(overrides, str) else list(overrides)  # one "KEY=VALUE" is one override
    return load_run(run_experiment(load_config(config, assignments), quiet=quiet))


def audit(
    app_dir: str | Path,
    config: str | Path | None = None,
    overrides: Sequence[str] = (),
    *,
    run_config: str | None = None,
    run_dir: str | Path | None = None,
) -> Run:
    """Audit an existing Flower app, unedited, exactly as ``fedsim audit APP_DIR --config AUDIT.yaml --set ...
    --run-config ...`` does, and return the run loaded.

    Parameters
    ----------
    app_dir
        The Flower app's folder (its ``pyproject.toml`` names its ServerApp and ClientApp).
    config
        The audit file: what the attacker knows of the app, its data function for scoring (None: every default).
    overrides
        ``KEY=VALUE`` strings, as ``--set``.
    run_config
        The app's own run config overrides, as ``flwr run --run-config`` takes them.
    run_dir
        Where the run directory goes (None: ``output.dir/<name>-<timestamp>``).

    Returns
    -------
    Run
        The finished audit run.

    Raises
    ------
    fedsim.core.errors.ConfigError
        A bad app folder, audit file or override, with the command line's one-line message, before torch loads.

    Examples
    --------
    >>> run = fedsim.audit("configs/flower-apps/opacus-pytorch", "configs/flower-apps/opacus-pytorch-audit.yaml",
    ...                    run_config='data-files="cifar10.parquet"')                   # doctest: +SKIP
    >>> run.events("app_dp")[["round", "client", "mechanism", "noise_multiplier"]]   # doctest: +SKIP
    """
    from fedsim.engine.app_audit.preflight import preflight

    assignments = [overrides] if isinstance(overrides, str) else list(overrides)
    config_path = Path(config) if config is not None else None
    preflight(Path(app_dir), config_path, assignments, run_config)
    from fedsim.engine.app_audit.runner import audit_app

    where = Path(run_dir) if run_dir is not None else None
    return load_run(audit_app(Path(app_dir), config_path, assignments, run_config, run_dir=where))
