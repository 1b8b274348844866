"""Presets: published settings of an attack, named, sourced, validated like any attack config, run by `strongest`."""

from __future__ import annotations

import pytest

from adversary import ATTACKS
from fedsim.cli import main
from fedsim.config import AttackOptions, parse_config
from fedsim.core.errors import ConfigError


def every_preset() -> list[tuple[str, str]]:
    return [(name, preset) for name in ATTACKS.names() for preset in ATTACKS.config(name).presets]


def test_the_papers_settings_are_presets_with_their_source():
    presets = {f"{name}@{preset}" for name, preset in every_preset()}
    assert {"dlg@paper-003", "ig@geiping-2020", "gradinversion@yin-2021", "ig-noise@paper-001"} <= presets
    # every adaptive attack has its paper's settings
    adaptive = [name for name in ATTACKS.names() if ATTACKS.config(name).adapts_to]
    assert adaptive and all(ATTACKS.config(name).presets for name in adaptive)
    assert all(ATTACKS.config(name).presets[preset].source for name, preset in every_preset())


@pytest.mark.parametrize(("name", "preset"), every_preset())
def test_every_preset_validates_as_the_attacks_own_config(name, preset):
    options = AttackOptions(name=name, preset=preset)
    settings = ATTACKS.config(name).presets[preset].options
    assert options.label == f"{name}@{preset}"
    assert all(getattr(options, key) == value for key, value in settings.items() if key != "regularizers")


def test_paper_003s_dlg_settings_in_shorthand_and_a_key_beside_a_preset_wins():
    config = parse_config({"adversary": {"attacks": ["dlg@paper-003", {"name": "dlg@paper-003", "restarts": 4}]}})
    first, second = config.adversary.attacks
    assert (first.preset, first.iterations, first.init_scale, first.regularizers) == ("paper-003", 1300, 0.05, [])
    assert (second.iterations, second.restarts) == (1300, 4)


def test_an_unknown_preset_is_one_line_naming_field_value_and_allowed():
    with pytest.raises(ConfigError) as error:
        parse_config({"adversary": {"attacks": [{"name": "dlg", "preset": "paper-999"}]}})
    message = str(error.value)
    assert "\n" not in message
    assert "preset" in message and "paper-999" in message and "allowed: paper-003, paper-003-aggregate" in message


def test_strongest_runs_every_preset_beside_the_defaults():
    labels = [o.label for o in parse_config({"adversary": {"attacks": "strongest"}}).adversary.attacks]
    assert {"dlg", "dlg@paper-003", "ig", "ig@geiping-2020"} <= set(labels)
    excluded = parse_config({"adversary": {"attacks": "strongest", "portfolio_exclude": ["ig@geiping-2020"]}})
    assert "ig@geiping-2020" not in [o.label for o in excluded.adversary.attacks]


def test_fedsim_list_shows_the_presets(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "dlg@paper-003" in out and "ig@geiping-2020" in out and "Geiping et al. 2020" in out
