"""fedsim: measure how much private training data leaks out of federated learning."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["load_run", "load_sweep"]


def __getattr__(name: str) -> Any:
    # The notebook API pulls in pandas and torch; importing it lazily keeps `import fedsim` (and the CLI) light.
    if name in ("load_run", "load_sweep"):
        from fedsim.rundir import reader as notebook

        return getattr(notebook, name)
    raise AttributeError(f"module 'fedsim' has no attribute {name!r}")
