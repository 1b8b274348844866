"""The two errors every layer may raise; imports nothing of the project."""


class TrainingFailed(RuntimeError):
    """A run played its rounds but none of them updated the global model (its rows are all kept)."""


class ConfigError(ValueError):
    """A configuration problem, already phrased as one line for the user."""
