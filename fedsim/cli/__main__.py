"""``python -m fedsim.cli``: the ``fedsim`` command."""

from fedsim.cli import entry

entry()
