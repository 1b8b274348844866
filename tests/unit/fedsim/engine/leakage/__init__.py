"""Unit tests of `fedsim.engine.leakage`."""
