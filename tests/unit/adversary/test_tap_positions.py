"""Tap positions: `adversary.tap` names one registered in TAPS, and a new position is one new file."""

import re
from types import SimpleNamespace

import pytest

from adversary.tap_positions import TAPS
from adversary.taps import TappedUpdate
from fedsim.config import ConfigError, parse_config, refresh_plugins
from tests.helpers.discovery import package_with_new_module

SERVER_INBOX = '''
"""``server-inbox``: the server reading the replies off its own grid, before its strategy unwraps them."""

from adversary.tap_positions.registry import TAPS, TapPosition, TapWiring


class InboxPosition(TapPosition):
    def wrap(self, protocol, sink, wants, layout):
        return TapWiring(lambda grid: protocol.wire_tap(grid, sink, wants, layout), lambda strategy: strategy)


POSITION = InboxPosition(name="server-inbox", malicious_server=False, holds_aggregate=False)
TAPS.register(POSITION.name, help="each reply as it reaches the server, before the strategy")(POSITION)
'''


def update(tap: str) -> TappedUpdate:
    return TappedUpdate(1, tap, "client:0", {}, {}, num_examples=4, local_steps=1, contributors=(0,))


def test_an_unknown_tap_is_refused_with_the_registered_positions():
    with pytest.raises(
        ConfigError, match=r"^adversary.tap = 'wire': unknown tap position 'wire'; allowed: mitm, server$"
    ):
        parse_config({"adversary": {"tap": "wire"}})


def test_the_built_in_positions_plug_in_where_they_listen():
    protocol = SimpleNamespace(
        wire_tap=lambda grid, sink, wants, layout: ("wire tap on", grid),
        strategy_tap=lambda strategy, sink, wants, layout: ("strategy tap on", strategy),
    )
    mitm = TAPS.get("mitm").attach(protocol, print, lambda r: True, {})
    assert mitm.wrap_grid("grid") == ("wire tap on", "grid") and mitm.wrap_strategy("fedavg") == "fedavg"
    server = TAPS.get("server").attach(protocol, print, lambda r: True, {})
    assert server.wrap_grid is None and server.wrap_strategy("fedavg") == ("strategy tap on", "fedavg")
    assert TAPS.get("server").malicious_server and not TAPS.get("mitm").malicious_server


def test_a_new_file_in_the_tap_positions_package_registers_a_position_the_config_accepts(tmp_path):
    assert "server-inbox" not in TAPS
    try:
        with package_with_new_module(
            "adversary.tap_positions", "server_inbox", SERVER_INBOX, tmp_path / "taps", TAPS, "server-inbox"
        ):
            refresh_plugins()  # the config names the positions registered when it was composed
            assert parse_config({"adversary": {"tap": "server-inbox"}}).adversary.tap == "server-inbox"
            seen = []
            protocol = SimpleNamespace(wire_tap=lambda grid, sink, wants, layout: sink)
            wrapped_sink = TAPS.get("server-inbox").attach(protocol, seen.append, lambda r: True, {}).wrap_grid("grid")
            wrapped_sink(update("mitm"))  # the protocol's wire tap writes its own name: the position's replaces it
            assert [u.tap for u in seen] == ["server-inbox"]
            with pytest.raises(ConfigError, match=r"set tap: server$"):
                parse_config({"adversary": {"tap": "server-inbox", "server": "malicious"}})
    finally:
        refresh_plugins()
    with pytest.raises(ConfigError, match="unknown tap position 'server-inbox'"):
        parse_config({"adversary": {"tap": "server-inbox"}})


def test_fedsim_list_shows_the_tap_positions_with_what_each_observes(capsys):
    from fedsim.cli import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    listed = out[out.index("tap positions (adversary.tap)") :]
    for name in TAPS:
        assert re.search(rf"^\s*{name}\s+{re.escape(TAPS.describe()[name][:40])}", listed, re.MULTILINE)
