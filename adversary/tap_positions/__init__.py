"""Tap positions, one module each, registered in ``TAPS`` (``registry``): every module of this package is
imported, so a new position is one new file."""

from adversary.tap_positions.registry import TAPS, TapPosition, TapWiring
from fedsim.core.registry import import_submodules

__all__ = ["TAPS", "TapPosition", "TapWiring"]

import_submodules(__name__, __path__)
