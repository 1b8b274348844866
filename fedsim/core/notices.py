"""Warnings as log lines: one line each, without the source line that Python's default display echoes.

``warnings.warn`` shows ``file:line: Category: message`` and then the line of code that warned (``lpips =
Lpips(...)``), which tells a user of the command line nothing. The command line and a sweep's workers route
warnings through the ``fedsim`` logger instead: fedsim's own warnings as their message alone, anyone else's
with their category and origin, still on one line. Which warnings are shown, and how often, stays Python's
``warnings`` filters' business.
"""

from __future__ import annotations

import logging
import warnings
from typing import TextIO

#: the packages whose warnings are fedsim's own, shown as their message alone
OWN_PACKAGES = ("fedsim", "clients", "strategies", "adversary")


def warning_line(message: Warning | str, category: type[Warning], filename: str, lineno: int) -> str:
    """One line for a warning: fedsim's own as its message, others as ``Category: message (file:line)``."""
    text = " ".join(str(message).split())  # a message of several lines still makes one
    if category.__module__.split(".", 1)[0] in OWN_PACKAGES:
        return text
    return f"{category.__name__}: {text} ({filename}:{lineno})"


def _log_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    logging.getLogger("fedsim").warning("%s", warning_line(message, category, filename, lineno))


def warnings_as_log_lines() -> None:
    """Show every warning from now on as one line of the ``fedsim`` log (``warnings.showwarning``)."""
    warnings.showwarning = _log_warning
