"""How an adversary's attacks become jobs: which targets each attack runs on, and which are already done."""

import pytest

from adversary.adversary import recorded_attacks
from fedsim.config import AttackOptions, ConfigError, parse_config


def test_an_attack_runs_on_the_kind_of_target_it_names():
    per_client, aggregate, both = (
        AttackOptions(name="dlg", inverts=kind) for kind in ("per-client", "aggregate", "both")
    )
    assert per_client.applies_to("client:3") and not per_client.applies_to("aggregate")
    assert aggregate.applies_to("aggregate") and not aggregate.applies_to("client:0")
    assert both.applies_to("aggregate") and both.applies_to("client:0")


def test_attacks_limited_to_a_target_kind_count_as_done_only_for_their_targets():
    attacks = [
        AttackOptions(name="dlg", inverts="per-client"),
        AttackOptions(name="dlg", tv_weight=0.03, inverts="aggregate"),
    ]
    rows = [
        {"event": "attack", "round": 1, "attack": "dlg", "target": "client:0"},
        {"event": "attack", "round": 1, "attack": "dlg", "target": "aggregate"},
    ]
    assert recorded_attacks(rows, 1, attacks) == {(0, "client:0"), (1, "aggregate")}


def test_an_attack_on_targets_the_adversary_never_attacks_is_a_one_line_error():
    raw = {"adversary": {"targets": "per-client", "attacks": [{"name": "dlg", "inverts": "aggregate"}]}}
    with pytest.raises(ConfigError) as error:
        parse_config(raw)
    message = str(error.value)
    assert "adversary.attacks.0.inverts = aggregate" in message and "allowed: both or per-client" in message
    assert "\n" not in message


def test_attacks_of_the_same_name_count_as_done_one_row_each():
    attacks = [AttackOptions(name="dlg"), AttackOptions(name="ig"), AttackOptions(name="dlg")]
    rows = [
        {"event": "attack", "round": 2, "attack": "dlg", "target": "client:0"},
        {"event": "attack", "round": 2, "attack": "dlg", "target": "client:0"},
        {"event": "attack", "round": 2, "attack": "dlg", "target": "client:1"},
        {"event": "attack", "round": 1, "attack": "ig", "target": "client:0"},
        {"event": "eval", "round": 2},
    ]
    assert recorded_attacks(rows, 2, attacks) == {(0, "client:0"), (2, "client:0"), (0, "client:1")}
