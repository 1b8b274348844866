"""Values the config refuses in one line naming the key: selections of nothing, non-finite numbers, seeds out
of range, YAML alias bombs, settings an attacker could not simulate."""

from __future__ import annotations

import pytest

from fedsim.config import ConfigError, parse_config


def test_an_attacker_that_knows_the_local_training_refuses_adam():
    with pytest.raises(ConfigError, match=r"^client.optimizer = 'adam': an attacker that knows the local training simulates SGD"):
        parse_config({"client": {"optimizer": "adam"}, "adversary": {"attacks": ["dlg"]}})
    parse_config({"client": {"optimizer": "adam"}, "adversary": {"attacks": ["dlg"], "knows": {"local_training": False}}})
