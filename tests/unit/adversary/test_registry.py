"""The attack registry: every attack names its paper or the defense it adapts to; unknown names are errors."""

from __future__ import annotations

import pytest

from adversary import ATTACKS
from adversary.attacks import gradinversion, inverting_gradients
from fedsim.config import AttackOptions, ConfigError, parse_config


def test_every_attack_is_registered_with_its_paper_or_the_defense_it_adapts_to():
    assert {"dlg", "ggssr", "gradinversion", "idlg", "ig"} <= set(ATTACKS.names())
    for name, help_text in ATTACKS.describe().items():
        adapts_to = ATTACKS.config(name).adapts_to
        if adapts_to:  # an adaptive variant names the defense whose mechanism it models
            assert all(defense in help_text for defense in adapts_to), name
        else:
            assert "20" in help_text, name  # a year: the paper is named
    assert AttackOptions(name="dlg").optimizer == "lbfgs"
    assert AttackOptions(name="ig").loss == "cosine"
    assert gradinversion.SPEC.bn_prior and not inverting_gradients.SPEC.bn_prior


def test_unknown_attack_names_are_config_errors():
    with pytest.raises(ConfigError, match="dlg"):
        parse_config({"adversary": {"attacks": ["dlgg"]}})
