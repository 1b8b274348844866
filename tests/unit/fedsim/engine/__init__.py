"""Unit tests of `fedsim.engine`."""
