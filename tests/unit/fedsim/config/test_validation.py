"""Values the config refuses in one line naming the key: selections of nothing, non-finite numbers, seeds out
of range, YAML alias bombs, settings an attacker could not simulate."""

from __future__ import annotations

import math

import pytest
from cli_errors import one_line_error
from tiny_configs import tiny_raw

from fedsim.config import ConfigError, parse_config


def test_an_attacker_that_knows_the_local_training_refuses_adam():
    with pytest.raises(
        ConfigError, match=r"^client.optimizer = 'adam': an attacker that knows the local training simulates SGD"
    ):
        parse_config({"client": {"optimizer": "adam"}, "adversary": {"attacks": ["dlg"]}})
    parse_config(
        {"client": {"optimizer": "adam"}, "adversary": {"attacks": ["dlg"], "knows": {"local_training": False}}}
    )


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"client": {"lr": math.inf}}, "client.lr = inf"),
        ({"client": {"lr": math.nan}}, "client.lr = nan"),
        ({"client": {"defenses": [{"name": "noise", "sigma": math.inf}]}}, "client.defenses[0].sigma = inf"),
        ({"federation": {"round_timeout": math.inf}}, "federation.round_timeout = inf"),  # a hang would never end
        ({"strategy": {"dp": {"noise_multiplier": math.nan}}}, "strategy.dp.noise_multiplier = nan"),
        ({"adversary": {"attacks": [{"name": "ig", "lr": math.inf}]}}, "adversary.attacks[0].lr = inf"),
    ],
)
def test_inf_and_nan_are_refused_in_one_line_naming_the_key(overrides, key):
    with pytest.raises(ConfigError) as error:
        parse_config(tiny_raw(**overrides))
    message = str(error.value)
    assert message.startswith(key) and "finite" in message and "\n" not in message


@pytest.mark.parametrize(
    ("adversary", "starts"),
    [
        ({"rounds": "5-2"}, "adversary.rounds = '5-2': selects no round; an interval"),
        ({"rounds": [99]}, "adversary.rounds = [99]: selects no round of 1 .. 1"),
        ({"rounds": []}, "adversary.rounds = []: selects no round"),
        ({"clients": [99]}, "adversary.clients = [99]: no client 99; partition ids run 0 .. 1"),
        ({"clients": [-1]}, "adversary.clients = [-1]: selects no client"),
    ],
)
def test_an_adversary_that_selects_nothing_is_refused(adversary, starts):
    with pytest.raises(ConfigError) as error:
        parse_config(tiny_raw(adversary={"attacks": ["dlg"], **adversary}))
    assert str(error.value).startswith(starts)


def test_a_seed_beyond_what_the_generators_take_is_one_line():
    with pytest.raises(ConfigError, match=r"^seed = 1180591620717411303424: Input should be less than 4294967296"):
        parse_config(tiny_raw(seed=2**70))


def test_a_yaml_alias_bomb_is_bounded_and_one_line(tmp_path, capsys):
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for level in "bcdefgh":
        previous = chr(ord(level) - 1)
        lines.append(f"{level}: &{level} [" + ",".join([f"*{previous}"] * 9) + "]")
    lines.append("name: *h")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert "expands to more than 100,000 values" in one_line_error(capsys, "validate", str(path))


@pytest.mark.parametrize(("attacked", "selects"), [([999_999_999], True), ("5-999999999", True), ([10**9 + 1], False)])
def test_whether_the_adversary_attacks_a_round_is_known_without_walking_the_rounds(monkeypatch, attacked, selects):
    from fedsim.config.adversary import AdversaryConfig

    asked, answer = [], AdversaryConfig.attacks_round

    def walked(self, server_round):  # a billion rounds asked one by one took an hour
        asked.append(server_round)
        if len(asked) > 100:
            raise AssertionError("validation walks the rounds one by one")
        return answer(self, server_round)

    monkeypatch.setattr(AdversaryConfig, "attacks_round", walked)
    raw = tiny_raw(federation={"rounds": 10**9}, adversary={"attacks": ["dlg"], "rounds": attacked})
    if selects:
        assert parse_config(raw).federation.rounds == 10**9
    else:
        with pytest.raises(ConfigError, match=r"selects no round of 1 \.\. 1000000000"):
            parse_config(raw)
