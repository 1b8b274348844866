"""Clocks a test moves itself, in place of the one attack time limits are read on (adversary.inversion.clock): a
limit then cuts an attack after the same number of iterations on a busy laptop as on an idle server."""

from __future__ import annotations

from collections.abc import Callable


def stepping(step: float) -> Callable[[], float]:
    """A clock that reads 0, ``step``, 2 x ``step``, ...: every reading (one per iteration) moves it by ``step``."""
    readings = iter(range(10**12))
    return lambda: next(readings) * step


def jumping_past(seconds: float) -> Callable[[], float]:
    """A clock that reads 0 once (when a limit starts), then ``seconds`` at every later reading: a limit shorter
    than that runs out before the first iteration finishes."""
    readings = iter((0.0,))
    return lambda: next(readings, seconds)


def install(make: Callable[[float], Callable[[], float]], value: float) -> None:
    """Put the clock ``make(value)`` in place in this process: in an attack worker, through
    ``ProcessAttackWorkers.call(install, stepping, 0.5)`` (the clock itself, a closure, would not pickle)."""
    from adversary.inversion import clock

    clock.now = make(value)
