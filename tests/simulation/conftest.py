"""Everything in this folder starts a real Flower/Ray federation (or a SuperLink): all of it is marked
``simulation``, so ``pytest -m "not simulation"`` leaves it out even where a test forgets its own mark."""

from pathlib import Path

import pytest

SIMULATION_FOLDER = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        if SIMULATION_FOLDER in item.path.parents:
            item.add_marker(pytest.mark.simulation)
