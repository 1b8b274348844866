"""Server strategies (FedAvg, SecAgg+), Flower's central-DP wrappers, and the taps that observe them."""

from strategies import dp, fedavg, secagg  # noqa: F401  (each registers its strategy or DP modes)
from strategies.factory import build_strategy
from strategies.registry import STRATEGIES

__all__ = ["STRATEGIES", "build_strategy"]
