"""Unit tests of `fedsim.engine.lifecycle`."""
