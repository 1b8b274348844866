"""Addresses are parsed and probed."""

from __future__ import annotations

import pytest

from fedsim.config import ConfigError
from fedsim.engine.lifecycle.network import Unreachable, free_port, host_and_port, probe


def test_addresses_are_parsed_and_probed():
    assert host_and_port("[::1]:9093", "x") == ("::1", 9093)
    with pytest.raises(ConfigError, match="expected HOST:PORT"):
        host_and_port("127.0.0.1:99999", "--superlink")
    with pytest.raises(Unreachable, match="nothing answers there"):
        probe(f"127.0.0.1:{free_port()}", "--superlink")
