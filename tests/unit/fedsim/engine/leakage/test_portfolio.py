"""The attack portfolio: `strongest` keeps the attacks that apply to the defenses in force and adapts them."""

from pathlib import Path

import pytest
import torch
from torch import nn

from adversary.inversion.options import AttackOptions
from fedsim.config import parse_config
from fedsim.core.errors import ConfigError
from fedsim.engine.leakage.portfolio import attack_setting, resolve_attacks

SHAPE = (1, 6, 6)
REPO = Path(__file__).resolve().parents[5]


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(36, 24), nn.Tanh(), nn.Linear(24, 5)).double()


def strongest_config(**adversary):
    return parse_config(
        {
            "data": {"dataset": "digits", "image_size": 8},
            "model": {"name": "mlp3"},
            "client": {"defenses": [{"name": "prune", "ratio": 0.9}]},
            "adversary": {"attacks": "strongest", **adversary},
        }
    )


def setting_of(config):
    return attack_setting(config.adversary, config.client, config.model.name, False, tiny_model(), SHAPE, 5)


def resolved(config):
    """``config`` with the attacks that apply to a tiny model, as a run's composition root resolves them."""
    adversary = resolve_attacks(config.adversary, config.client.defenses, setting_of(config))
    return config.model_copy(update={"adversary": adversary})


def test_strongest_keeps_the_attacks_that_apply_and_adapts_them():
    config = strongest_config()
    assert config.adversary.portfolio == "strongest"
    setting = setting_of(config)
    names = [options.name for options in resolve_attacks(config.adversary, config.client.defenses, setting).attacks]
    assert {"dlg", "ig", "ig-prune"} <= set(names)
    assert not {"ig-noise", "ig-soteria", "ig-dropout", "ig-clip", "gradinversion"} & set(names)
    (prune,) = [o for o in resolved(config).adversary.attacks if o.label == "ig-prune"]
    assert prune.match_entries == "nonzero"


def test_an_attack_named_where_it_cannot_apply_is_refused_in_one_line():
    config = strongest_config()
    config = config.model_copy(
        update={
            "adversary": config.adversary.model_copy(
                update={"portfolio": "listed", "attacks": [AttackOptions(name="ig-soteria")]}
            )
        }
    )
    with pytest.raises(ConfigError) as error:
        resolved(config)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("adversary.attacks[0] = ig-soteria: ig-soteria adapts to soteria")


def test_a_sweep_point_with_strongest_matches_the_run_that_resolved_it():
    from fedsim.sweep.execute import _comparable

    config = strongest_config()
    kept = resolved(config)
    assert len(kept.adversary.attacks) < len(config.adversary.attacks)
    assert _comparable(kept) == _comparable(config)
    other = parse_config(
        {
            **config.model_dump(mode="json"),
            "adversary": {**config.adversary.model_dump(mode="json"), "portfolio_options": {"iterations": 10}},
        }
    )
    assert _comparable(other) != _comparable(config)


def test_validate_warns_in_one_line_where_no_attack_adapts_to_the_defense(capsys):
    from pathlib import Path

    from fedsim.cli import main

    demo = str(Path(__file__).resolve().parents[5] / "configs" / "demo.yaml")
    noise = "client.defenses=[{name: noise, sigma: 0.01}]"
    assert main(["validate", demo, "--set", noise]) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1
    assert "noise" in warnings[0] and "ig-noise would apply" in warnings[0] and "lower bound" in warnings[0]
    assert main(["validate", demo, "--set", noise, "--set", "adversary.attacks=strongest"]) == 0
    assert "warning:" not in capsys.readouterr().out


def test_an_unsaturated_portfolio_under_a_defense_is_a_lower_bound():
    from fedsim.engine.leakage.portfolio import verdict_warning

    saturated = strongest_config()
    assert verdict_warning(saturated.adversary, saturated.client.defenses) is None
    unsaturated = strongest_config(budget={"saturate": False})
    assert "does not saturate" in verdict_warning(unsaturated.adversary, unsaturated.client.defenses)


def test_the_warning_names_only_the_adapted_attacks_that_apply_to_the_model():
    import dataclasses

    from fedsim.engine.leakage.portfolio import verdict_warning

    config = strongest_config()  # prune in force
    listed = config.adversary.model_copy(update={"portfolio": "listed", "attacks": [AttackOptions(name="dlg")]})
    image = setting_of(config)
    text_model = tiny_model()
    text_model.modality = "text"  # as fedsim's text models say
    text = dataclasses.replace(image, model=text_model, model_name="gpt2")
    assert "prune (ig-prune would apply)" in verdict_warning(listed, config.client.defenses, image)
    assert "prune (fedsim has no attack adapted to it)" in verdict_warning(listed, config.client.defenses, text)


@pytest.mark.parametrize(
    ("defenses", "attacks"),
    [([], ["ig"]), ([{"name": "gradient_dropout", "p": 0.6, "sigma": 0.005}], ["ig", "ig-dropout"])],
)
def test_paper_004s_resnet_config_runs_only_the_attacks_its_cpu_budget_names(defenses, attacks):
    """configs/papers/004-gradient-dropout-resnet18.yaml sizes its table's run time (bench.gradient_dropout) for
    Inverting Gradients and ig-dropout: an attack added to the portfolio must not join it unnoticed."""
    import yaml

    from fedsim.models import build_model

    raw = yaml.safe_load((REPO / "configs" / "papers" / "004-gradient-dropout-resnet18.yaml").read_text())
    raw.pop("sweep")
    raw["client"]["defenses"] = defenses
    config = parse_config(raw)
    model = build_model(config.model, 3, 10, 32, seed=0)
    setting = attack_setting(config.adversary, config.client, config.model.name, False, model, (3, 32, 32), 10)
    resolved_attacks = resolve_attacks(config.adversary, config.client.defenses, setting).attacks
    assert sorted(options.label for options in resolved_attacks) == attacks
