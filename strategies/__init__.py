"""Server strategies (FedAvg, later SecAgg+), Flower's central-DP wrappers, and the taps that observe them."""

from strategies.factory import build_strategy
from strategies.registry import STRATEGIES

__all__ = ["STRATEGIES", "build_strategy"]
