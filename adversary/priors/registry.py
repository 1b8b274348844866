"""name -> generative prior, with its config model (whose ``load`` builds it); each prior's module registers itself."""

from fedsim.core.registry import Registry

PRIORS: Registry = Registry("prior")
