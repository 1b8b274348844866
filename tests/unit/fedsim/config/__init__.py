"""Unit tests of `fedsim.config`."""
