"""A served model's description, read on the client: bounded and checked field by field, each refusal one line
naming the field, before anything is allocated for it."""

from __future__ import annotations

import json

import pytest
from torch import nn

import adversary.modifications  # noqa: F401  (registers the imprint architecture)
from adversary.modifications.imprint import ImprintedModel
from adversary.modifications.served import MAX_DESCRIPTION_CHARS, ServedModelError, describe, rebuild

SHAPE = (1, 8, 8)  # this client's images: 64 values


def agreed() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))


def imprint(**fields) -> str:
    return json.dumps({"architecture": "imprint", **fields})


def test_a_description_within_bounds_is_built_for_the_clients_images():
    served = ImprintedModel(agreed(), input_size=64, bins=65536)
    rebuilt = rebuild(describe(served), agreed(), SHAPE)
    assert rebuilt.imprint.weight.shape == (65536, 64)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"input_size": 64}, "the served imprint description has no 'bins'; it needs: bins, input_size"),
        ({"bins": 8}, "the served imprint description has no 'input_size'; it needs: bins, input_size"),
        ({"input_size": 64, "bins": 10**12}, "bins = 1000000000000; allowed: a whole number 2 .. 65536"),
        ({"input_size": 64, "bins": 1}, "bins = 1; allowed: a whole number 2 .. 65536"),
        ({"input_size": 64, "bins": "8"}, "bins = '8'; allowed: a whole number 2 .. 65536"),
        ({"input_size": 64, "bins": 8.0}, "bins = 8.0; allowed: a whole number 2 .. 65536"),
        ({"input_size": 64, "bins": True}, "bins = True; allowed: a whole number 2 .. 65536"),
        ({"input_size": 10**9, "bins": 8}, "input_size = 1000000000; allowed: a whole number 64"),
        ({"input_size": 64, "bins": 8, "extra": 1}, "holds 'extra', which this client does not build"),
    ],
)
def test_a_description_missing_a_size_or_out_of_bounds_is_one_line_naming_the_field(fields, message):
    with pytest.raises(ServedModelError) as refused:
        rebuild(imprint(**fields), agreed(), SHAPE)
    assert message in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "payload",
    [
        "[" * 100_000 + "]" * 100_000,  # nesting deep enough to exhaust the JSON parser's recursion
        imprint(input_size=64, bins=8, padding="x" * MAX_DESCRIPTION_CHARS),
        json.dumps({"architecture": ["imprint"]}),
    ],
)
def test_an_oversized_or_malformed_description_is_one_line(payload):
    with pytest.raises(ServedModelError) as refused:
        rebuild(payload, agreed(), SHAPE)
    assert "\n" not in str(refused.value)
