"""Warnings on the command line: one log line each, no echo of the source line that warned."""

import logging
import warnings

from fedsim.cli.console import setup_logging
from fedsim.core.notices import warning_line


class ThirdPartyWarning(UserWarning):
    """A warning from outside fedsim (its module is this test's)."""


def test_fedsims_own_warnings_are_their_message_and_others_name_their_origin():
    from fedsim.judge.metrics import LpipsUnavailableWarning

    own = warning_line("LPIPS unavailable, reported as None:\n  no weights", LpipsUnavailableWarning, "/x/m.py", 3)
    assert own == "LPIPS unavailable, reported as None: no weights"
    other = warning_line("deprecated", ThirdPartyWarning, "/lib/pkg.py", 12)
    assert other == "ThirdPartyWarning: deprecated (/lib/pkg.py:12)"


def test_the_command_line_shows_a_warning_as_one_line_without_the_code_that_warned(capsys):
    from fedsim.judge.metrics import LpipsUnavailableWarning

    logger = logging.getLogger("fedsim")
    handlers, level, propagate = logger.handlers[:], logger.level, logger.propagate
    try:
        with warnings.catch_warnings():  # restores Python's own display afterwards
            warnings.simplefilter("always")
            setup_logging(quiet=True)
            warnings.warn("LPIPS unavailable, reported as None: no weights", LpipsUnavailableWarning, stacklevel=1)
    finally:
        logger.handlers[:], logger.level, logger.propagate = handlers, level, propagate
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].endswith("WARNING fedsim: LPIPS unavailable, reported as None: no weights")
    assert "warnings.warn" not in lines[0] and "test_notices.py" not in lines[0]
