"""fedsim: measure how much private training data leaks out of federated learning.

From Python, in the pandas way:

    import fedsim

    run = fedsim.run("configs/quickstart.yaml", overrides=["federation.rounds=3"])
    run.events("eval")[["round", "accuracy"]]      # one row per evaluated round
    run.images()                                   # one row per reconstructed image, with its scores
    run.privacy()                                  # epsilon_example / epsilon_client spent by each round

    run = fedsim.load_run("runs/quickstart-20261122-101500")   # a run that already ran
    sweep = fedsim.load_sweep("runs/defense-frontier-sweep-20261123-101500")

Importing ``fedsim`` is light: torch, Flower and Ray are imported when a run starts, pandas when one is
loaded, so that the command line starts in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedsim.rundir.reader import Run, Sweep, load_run, load_sweep

if TYPE_CHECKING:
    from fedsim.config import ExperimentConfig

__version__ = "0.1.0"
__all__ = ["Run", "Sweep", "load_run", "load_sweep", "run"]


def run(
    config: str | Path | Mapping[str, Any] | ExperimentConfig,
    overrides: Sequence[str] = (),
    *,
    quiet: bool = False,
) -> Run:
    """Run one experiment, exactly as ``fedsim run CONFIG --set KEY=VALUE ...`` does, and return it loaded.

    ``config``: a YAML file, the config's sections as a dict, or an ``ExperimentConfig``; ``overrides``:
    ``KEY=VALUE`` strings, as the command line's ``--set`` (``"client.lr=0.05"``); ``quiet``: log lines
    only, no live display. A bad config raises ``fedsim.core.errors.ConfigError`` with the command line's
    one-line message, before anything runs. The run writes its directory under ``output.dir`` as the command
    does; the returned ``Run`` reads it (``Run.path``), as ``fedsim.load_run`` would.

    >>> run = fedsim.run("configs/quickstart.yaml", overrides=["federation.rounds=2"])  # doctest: +SKIP
    >>> run.events("eval")[["round", "accuracy"]]                                       # doctest: +SKIP
       round  accuracy
    0      0  0.103333
    1      1  0.296667
    2      2  0.473333
    >>> fedsim.run({"federation": {"rounds": 2}, "data": {"dataset": "digits"}})      # doctest: +SKIP
    """
    from fedsim.config import load_config
    from fedsim.engine.lifecycle.runner import run_experiment

    assignments = [overrides] if isinstance(overrides, str) else list(overrides)  # one "KEY=VALUE" is one override
    return load_run(run_experiment(load_config(config, assignments), quiet=quiet))
