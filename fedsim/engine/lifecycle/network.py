"""Addresses of the services a run talks to (a SuperLink, a Ray cluster): parsed and probed before use, so
that a typo or a service that is down is one line naming the address, not a hang or a traceback."""

from __future__ import annotations

import socket

from fedsim.core.errors import ConfigError

PROBE_TIMEOUT_S = 5.0


def host_and_port(address: str, what: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as a pair; ``what`` names the setting in the error."""
    host, sep, port = address.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{what} = '{address}': expected HOST:PORT, e.g. 127.0.0.1:9093")
    return host, int(port)


class Unreachable(ConfigError):
    """Nothing answers at an address (one line, naming it)."""


def probe(address: str, what: str, hint: str = "") -> None:
    """Raise ``Unreachable`` unless something accepts a TCP connection at ``address``."""
    host, port = host_and_port(address, what)
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise Unreachable(
            f"{what} = '{address}': nothing answers there ({reason}){'; ' + hint if hint else ''}"
        ) from None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (for services started on this machine)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
