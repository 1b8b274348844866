"""Everything in this folder starts a real Flower/Ray federation (or a SuperLink): all of it is marked
``simulation``, so ``pytest -m "not simulation"`` leaves it out even where a test forgets its own mark.
The tiny real sweep the sweep and report simulations share runs once per session (Ray simulations are slow)."""

from pathlib import Path

import pytest
import yaml
from tiny_configs import tiny_raw

SIMULATION_FOLDER = Path(__file__).parent

TINY_SWEEP = tiny_raw(
    name="tiny",
    data={"max_train_samples": 40, "max_test_samples": 60},
    adversary={"targets": "both", "attacks": [{"name": "dlg", "iterations": 10, "restarts": 1}]},
    sweep={"grid": {"client.defenses": {"none": [], "noise": [{"name": "noise", "sigma": 0.1}]}}},
)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        if SIMULATION_FOLDER in item.path.parents:
            item.add_marker(pytest.mark.simulation)


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory) -> Path:
    """Two one-round runs (no defense, noise) on 2 clients of digits, attacked per client and as the
    aggregate by a short DLG, run two at a time in worker processes. Returns the sweep directory."""
    from fedsim.sweep import plan_sweep, run_sweep

    root = tmp_path_factory.mktemp("sweep")
    config = root / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY_SWEEP, sort_keys=False))
    plan = plan_sweep(config, out=root / "tiny-sweep")
    outcomes = run_sweep(plan, parallel=2, cpus=2, quiet=True)
    assert [outcome.status for outcome in outcomes] == ["complete", "complete"], outcomes
    return plan.sweep_dir
