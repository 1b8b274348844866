"""The clock an attack's time limits are read on (``time_limit``, the saturation step's ``max_seconds``).

``now`` is ``time.perf_counter`` unless replaced: a test puts in a clock it moves itself, so that whether a limit
cuts an attack, and after how many iterations, is the same on a busy laptop and an idle server. Only the limits
read it; the ``seconds`` an attack reports stay wall-clock time.
"""

from __future__ import annotations

import time
from collections.abc import Callable

now: Callable[[], float] = time.perf_counter


def deadline_after(seconds: float | None) -> float | None:
    """The reading of ``now`` at which ``seconds`` from now have passed; None for no limit (None or 0)."""
    return now() + float(seconds) if seconds else None


def passed(deadline: float | None) -> bool:
    """Whether ``deadline`` (a ``deadline_after`` value; None: no limit) has been reached."""
    return deadline is not None and now() >= deadline
