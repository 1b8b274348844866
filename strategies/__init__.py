"""Server strategies (FedAvg, later SecAgg+) and the taps that observe them."""

from strategies.registry import STRATEGIES

__all__ = ["STRATEGIES"]
