"""Registry of server strategies: name -> class built from (FederationConfig, seed), with its config model.

The strategy modules register themselves when ``strategies`` imports them.
"""

from fedsim.core.registry import Registry

STRATEGIES: Registry = Registry("strategy")
