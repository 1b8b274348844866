"""The config's JSON Schema, shipped so that a command refuses a bad value before torch loads: current with the
sections and plugins, lenient where validation is (every shipped config passes), one line naming key and value."""

from __future__ import annotations

from pathlib import Path

import pytest
from repository import REPO_ROOT

from fedsim.config import load_config
from fedsim.config.schema import JSON_SCHEMA_FILE, json_schema_text
from fedsim.core.config_text import read_yaml
from fedsim.core.errors import ConfigError
from fedsim.core.schema_check import check_against_schema

SCHEMA = Path(JSON_SCHEMA_FILE)


def test_the_shipped_schema_is_the_one_the_sections_and_plugins_make():
    assert SCHEMA.read_text() == json_schema_text(), "regenerate it: python -m fedsim.config.schema"


@pytest.mark.parametrize(
    "path", [p for p in sorted((REPO_ROOT / "configs").rglob("*.yaml")) if "app" not in read_yaml(p)], ids=str
)
def test_every_shipped_config_passes_the_schema(path):
    raw = read_yaml(path)
    raw.pop("sweep", None)
    check_against_schema(raw, SCHEMA)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"adversary": {"attacks": [{"name": "dlg", "iterations": -1}]}},
            "adversary.attacks[0].iterations = -1: -1 is less",
        ),
        ({"adversary": {"attacks": [{"name": "dlgx"}]}}, "adversary.attacks[0].name = 'dlgx': not one of cpa, "),
        ({"client": {"lr": "fast"}}, "client.lr = 'fast': 'fast' is not of type 'number'"),
        ({"clinet": {}}, "clinet = {}: no such key here; allowed: adversary, client,"),
        (
            {"client": {"defenses": [{"name": "clip"}]}},
            "client.defenses[0] = {'name': 'clip'}: 'max_norm' is a required",
        ),
    ],
)
def test_a_value_the_schema_refuses_is_one_line_naming_key_and_value(raw, message):
    with pytest.raises(ConfigError) as refused:
        check_against_schema(raw, SCHEMA)
    assert str(refused.value).startswith(message)
    with pytest.raises(ConfigError):  # the full validation refuses it too: the schema is never stricter
        load_config({"data": {"dataset": "digits"}, **raw})


def test_shorthands_the_sections_expand_pass():
    check_against_schema({"adversary": {"attacks": "strongest"}, "client": {"defenses": ["soteria"]}}, SCHEMA)
    check_against_schema(
        {"adversary": {"attacks": ["dlg", "ig"]}, "data": {"dataset": "digits", "partition": "iid"}}, SCHEMA
    )
