"""Unit tests of `fedsim.rundir`."""
