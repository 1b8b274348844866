"""Unit tests of `fedsim.models`."""
