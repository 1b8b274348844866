"""Plugins own their config: each registers its name, help and config model; fedsim.config composes them.

A defense shipped by another package (entry-point group ``fedsim.plugins``) validates in a config, shows
in ``fedsim config-schema`` and runs in the client's defense pipeline like a built-in one.
"""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap

import pytest
import torch

from clients.defenses import DEFENSES
from fedsim.cli import main
from fedsim.config import ConfigError, parse_config, plugins, refresh_plugins
from fedsim.config.schema import plugin_schema, schema_rows

EXTRA_DEFENSE = '''
"""A defense from outside fedsim: scale the update."""

from typing import Literal

from pydantic import Field

from clients.defenses import DEFENSES, DefenseConfig, DefenseEntry, DefenseOutcome


class ScaleDefense(DefenseConfig):
    name: Literal["scale"] = "scale"
    factor: float = Field(..., gt=0, description="multiply every update entry by this")


def scale(update, config, context):
    return DefenseOutcome({key: value * config.factor for key, value in update.items()}, {"factor": config.factor})


DEFENSES.register("scale", help="scale the update by a constant", config=ScaleDefense)(
    DefenseEntry(kind="update", apply=scale)
)
'''


def install_entry_point_plugin(tmp_path, monkeypatch, module: str, source: str, registry, name: str):
    """Install ``source`` as ``module``, named in the `fedsim.config.plugins` entry points as a package would; yields,
    then removes the plugin ``name`` from ``registry`` and recomposes the config without it."""
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    entry_point = importlib.metadata.EntryPoint(name=name, value=module, group=plugins.ENTRY_POINT_GROUP)
    monkeypatch.setattr(
        importlib.metadata,
        "entry_points",
        lambda **selection: [entry_point] if selection.get("group") == plugins.ENTRY_POINT_GROUP else [],
    )
    refresh_plugins()
    yield
    registry.unregister(name)
    plugins._loaded.discard(module)
    sys.modules.pop(module, None)
    monkeypatch.undo()
    refresh_plugins()


@pytest.fixture
def extra_defense(tmp_path, monkeypatch):
    """The module above, installed as if by a package that names it in its `fedsim.config.plugins` entry points."""
    yield from install_entry_point_plugin(
        tmp_path, monkeypatch, "fedsim_extra_defense", EXTRA_DEFENSE, DEFENSES, "scale"
    )


def test_a_defense_from_an_entry_point_validates_shows_in_the_schema_and_runs(extra_defense, capsys):
    from clients.defenses.pipeline import apply_update_defenses

    config = parse_config({"client": {"defenses": [{"name": "scale", "factor": 2.0}, {"name": "clip", "max_norm": 1}]}})
    scale = config.client.defenses[0]
    assert type(scale).__name__ == "ScaleDefense" and scale.factor == 2.0

    with pytest.raises(ConfigError, match=r"client.defenses\[0\].factor = -1: Input should be greater than 0"):
        parse_config({"client": {"defenses": [{"name": "scale", "factor": -1}]}})
    with pytest.raises(
        ConfigError, match=r"unknown key 'client.defenses\[0\].sigma' for defense 'scale'; allowed here: name, factor"
    ):
        parse_config({"client": {"defenses": [{"name": "scale", "factor": 1, "sigma": 1}]}})

    assert (
        "client.defenses[scale].factor",
        "float",
        "(required)",
        "multiply every update entry by this",
    ) in schema_rows()
    assert main(["config-schema", "client.defenses.scale"]) == 0
    assert "client.defenses[scale].factor" in capsys.readouterr().out

    update, records = apply_update_defenses(config.client.defenses[:1], {"w": torch.ones(3)}, lambda position: None)
    assert torch.equal(update["w"], torch.full((3,), 2.0)) and records == {"defense.scale.factor": 2.0}


def test_the_extra_defense_is_gone_after_the_test():
    with pytest.raises(ConfigError, match="unknown defense 'scale'"):
        parse_config({"client": {"defenses": [{"name": "scale", "factor": 2.0}]}})


def test_a_plugin_that_fails_to_import_is_a_one_line_error(monkeypatch):
    broken = importlib.metadata.EntryPoint(
        name="broken", value="no_such_fedsim_plugin", group=plugins.ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **selection: [broken])
    with pytest.raises(ConfigError, match=r"plugin 'broken' .* failed to load: ModuleNotFoundError"):
        plugins.load_plugins()
    plugins._loaded.discard("no_such_fedsim_plugin")


@pytest.mark.parametrize("selector", ["client.defenses.gradient_dropout", "client.defenses[gradient_dropout]"])
def test_config_schema_prints_one_plugin(selector):
    keys = [row[0] for row in plugin_schema(selector)]
    assert keys == [
        "client.defenses[gradient_dropout]",
        "client.defenses[gradient_dropout].p",
        "client.defenses[gradient_dropout].sigma",
    ]


def test_every_registered_defense_and_attack_has_its_keys_in_the_schema():
    from adversary import ATTACKS

    rows = {row[0]: row for row in schema_rows()}
    for name in DEFENSES:
        config = DEFENSES.config(name)
        assert config is not None, f"defense {name} registered without a config model"
        for key in set(config.model_fields) - {"name"}:
            assert f"client.defenses[{name}].{key}" in rows
    for name in ATTACKS:
        for key in set(ATTACKS.config(name).model_fields) - {"name"}:
            assert f"adversary.attacks[{name}].{key}" in rows
    assert rows["adversary.attacks[ig].regularizers[tv].weight"][1] == "float"
    assert rows["adversary.attacks[ig].tv_weight"][1:] == ("deprecated", "", "renamed: use regularizers[tv].weight")
    assert rows["adversary.attacks[ig].regularizers"][2] == '[{"name": "tv", "weight": 0.0001}]'


def test_an_option_an_attack_does_not_have_is_an_error_naming_the_attack():
    with pytest.raises(ConfigError) as error:
        parse_config({"adversary": {"attacks": [{"name": "dlg", "bn_weight": 5}]}})
    message = str(error.value)
    assert message.startswith(
        "unknown key 'adversary.attacks[0].bn_weight' for attack 'dlg'; allowed here: name, inverts,"
    )
    assert "regularizers" in message and "\n" not in message


def test_regularizers_are_named_with_their_weight_and_checked():
    attack = parse_config(
        {"adversary": {"attacks": [{"name": "dlg", "regularizers": [{"name": "tv", "weight": 0.03}]}]}}
    )
    assert attack.adversary.attacks[0].tv_weight == 0.03
    with pytest.raises(
        ConfigError,
        match=r"adversary.attacks\[0\].regularizers\[0\].name = 'tvv': "
        r"unknown regularizer 'tvv' \(did you mean 'tv'\?\)",
    ):
        parse_config({"adversary": {"attacks": [{"name": "ig", "regularizers": [{"name": "tvv", "weight": 1}]}]}})
    with pytest.raises(ConfigError, match=r"adversary.attacks\[0\].regularizers\[0\].weight: Field required"):
        parse_config({"adversary": {"attacks": [{"name": "ig", "regularizers": ["tv"]}]}})
    with pytest.raises(ConfigError, match=r"tv_weight = 0.1 and regularizers \[tv\] both set the tv weight"):
        parse_config(
            {
                "adversary": {
                    "attacks": [{"name": "ig", "tv_weight": 0.1, "regularizers": [{"name": "tv", "weight": 1}]}]
                }
            }
        )


def test_the_old_tv_weight_becomes_the_same_regularizers_as_the_new_key():
    old = parse_config({"adversary": {"attacks": [{"name": "gradinversion", "tv_weight": 0.03}]}}).adversary.attacks[0]
    new = parse_config(
        {
            "adversary": {
                "attacks": [
                    {
                        "name": "gradinversion",
                        "regularizers": [{"name": "tv", "weight": 0.03}, {"name": "bn_statistics", "weight": 0.01}],
                    }
                ]
            }
        }
    ).adversary.attacks[0]
    assert old == new


def test_grid_and_set_keys_reach_plugin_options():
    from fedsim.config import apply_override

    raw = {"client": {"defenses": [{"name": "noise", "sigma": 0.1}]}, "adversary": {"attacks": ["ig"]}}
    apply_override(raw, "client.defenses.0.sigma=0.5")
    apply_override(raw, "adversary.attacks.0.regularizers=[{name: tv, weight: 0.2}]")
    config = parse_config(raw)
    assert config.client.defenses[0].sigma == 0.5 and config.adversary.attacks[0].tv_weight == 0.2


def test_the_docs_config_reference_is_generated_from_the_schema():
    """Regenerate with: fedsim config-schema --markdown, between docs/reference/config.md's config-schema markers."""
    from pathlib import Path

    from fedsim.config.schema import schema_markdown

    page = (Path(__file__).resolve().parents[4] / "docs" / "reference" / "config.md").read_text()
    start, end = "<!-- config-schema:start -->\n", "<!-- config-schema:end -->"
    block = page[page.index(start) + len(start) : page.index(end)]
    assert block == "\n" + schema_markdown() + "\n", "docs/reference/config.md is stale: regenerate it"


def test_attack_options_travel_as_pickles_and_plain_mappings():
    """What a worker process receives: the options pickled, or dumped and rebuilt as the named attack's model."""
    import pickle

    from fedsim.config import AttackOptions

    options = AttackOptions(name="gradinversion", iterations=5, regularizers=[{"name": "bn_statistics", "weight": 0.2}])
    assert type(options).__name__ == "GradInversionOptions" and isinstance(options, AttackOptions)
    assert pickle.loads(pickle.dumps(options)) == options
    assert AttackOptions.model_validate(options.model_dump()) == options == AttackOptions(**options.model_dump())
    assert (options.name, options.restarts, options.inverts, options.applies_to("aggregate")) == (
        "gradinversion",
        1,
        "both",
        True,
    )


EXTRA_REGULARIZER = '''
"""A regularizer from outside fedsim: the mean squared pixel of the dummy images."""

from typing import Literal

from pydantic import Field

from adversary.inversion.regularizers import REGULARIZERS, Regularizer, RegularizerConfig


class EnergyRegularizer(RegularizerConfig):
    name: Literal["energy"] = Field("energy", description="mean squared pixel of the dummy images")


REGULARIZERS.register("energy", help="mean squared pixel", config=EnergyRegularizer)(
    Regularizer(term=lambda x, context=None: x.pow(2).mean())
)
'''


@pytest.fixture
def extra_regularizer(tmp_path, monkeypatch):
    """A regularizer module named by an entry point, imported after adversary.attacks built its option models."""
    from adversary.inversion.regularizers import REGULARIZERS

    yield from install_entry_point_plugin(
        tmp_path, monkeypatch, "fedsim_extra_regularizer", EXTRA_REGULARIZER, REGULARIZERS, "energy"
    )


def test_a_regularizer_from_an_entry_point_is_named_in_attack_configs_and_the_schema(extra_regularizer):
    from adversary.inversion.regularizers import REGULARIZERS
    from fedsim.config import AttackOptions

    config = parse_config(
        {
            "adversary": {
                "attacks": [
                    {"name": "ig", "regularizers": [{"name": "energy", "weight": 0.5}, {"name": "tv", "weight": 0.01}]}
                ]
            }
        }
    )
    attack = config.adversary.attacks[0]
    assert type(attack.regularizers[0]).__name__ == "EnergyRegularizer" and attack.weight_of("energy") == 0.5
    assert AttackOptions(name="dlg", regularizers=[{"name": "energy", "weight": 1}]).weight_of("energy") == 1
    with pytest.raises(ConfigError, match=r"adversary.attacks\[0\].regularizers\[0\].weight: Field required"):
        parse_config({"adversary": {"attacks": [{"name": "ig", "regularizers": ["energy"]}]}})
    assert "adversary.attacks[gradinversion].regularizers[energy].weight" in {row[0] for row in schema_rows()}
    assert REGULARIZERS.get("energy").term(torch.full((1, 1, 2, 2), 3.0)) == 9.0


def test_the_extra_regularizer_is_gone_after_the_test():
    with pytest.raises(ConfigError, match="unknown regularizer 'energy'"):
        parse_config({"adversary": {"attacks": [{"name": "ig", "regularizers": [{"name": "energy", "weight": 1}]}]}})


def test_models_and_data_sets_register_their_config_models():
    from fedsim.data import DATASETS
    from fedsim.models import MODELS

    rows = {row[0] for row in schema_rows()}
    for name in MODELS:
        assert MODELS.config(name) is not None and f"model[{name}]" in rows
    assert {
        "model[resnet18].norm",
        "model[convnet].norm",
        "model[tv].pretrained",
        "data[npz].path",
        "data[imagefolder].path",
        "data[cifar10].root",
        "data[mnist].download",
    } <= rows
    assert not {"model[lenet].norm", "model[tv].dropout", "data[digits].path", "data[npz].root"} & rows
    assert [row[0] for row in plugin_schema("model.resnet18")] == [
        "model[resnet18]",
        "model[resnet18].activation",
        "model[resnet18].width",
        "model[resnet18].dropout",
        "model[resnet18].norm",
    ]
    assert all(DATASETS.config(name) is not None for name in DATASETS)
