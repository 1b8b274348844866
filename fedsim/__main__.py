"""``python -m fedsim``: the ``fedsim`` command."""

from fedsim.cli import entry

entry()
