"""Unit tests of `fedsim.data`."""
