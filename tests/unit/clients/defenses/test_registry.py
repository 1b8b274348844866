"""Every defense's bad parameters are one-line errors naming the field."""

import pytest
from defense_updates import defenses

from fedsim.config import ConfigError


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"name": "gradient_dropout", "p": 1.5, "sigma": 0.1}, "client.defenses[0].p = 1.5"),
        ({"name": "gradient_dropout", "p": 0.0, "sigma": 0.1}, "client.defenses[0].p = 0.0"),
        ({"name": "prune", "ratio": 1.0}, "client.defenses[0].ratio = 1.0"),
        ({"name": "noise", "sigma": -1}, "client.defenses[0].sigma = -1"),
        ({"name": "clip", "max_norm": 0}, "client.defenses[0].max_norm = 0"),
        ({"name": "soteria", "ratio": 0}, "client.defenses[0].ratio = 0"),
        ({"name": "noise", "sigma": 0.1, "distribution": "cauchy"}, "client.defenses[0].distribution = 'cauchy'"),
        (
            {"name": "gradient_dropot"},
            "unknown defense 'gradient_dropot' (did you mean 'gradient_dropout'?); allowed: clip, dpsgd",
        ),
    ],
)
def test_bad_defense_parameters_are_one_line_errors_naming_the_field(entry, field):
    with pytest.raises(ConfigError) as caught:
        defenses(entry)
    message = str(caught.value)
    assert field in message and "\n" not in message
