"""Unit tests of `fedsim.engine.deployment`."""
