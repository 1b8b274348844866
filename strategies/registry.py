"""Registry of server strategies: name -> class built from (FederationConfig, seed)."""

from fedsim.registry import Registry

STRATEGIES: Registry = Registry("strategy")

# Importing the modules registers their strategies.
from strategies import fedavg  # noqa: E402,F401
from strategies import secagg  # noqa: E402,F401
