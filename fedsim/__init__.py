"""fedsim: measure how much private training data leaks out of federated learning."""

__version__ = "0.1.0"
