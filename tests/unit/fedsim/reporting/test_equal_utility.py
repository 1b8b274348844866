"""The equal-utility table: per defense and accuracy budget, the lowest leakage among the strengths that cost
at most that much, or "none at this cost"."""

from fedsim.reporting.equal_utility import (
    NONE_AT_THIS_COST,
    StrengthPoint,
    cell_text,
    equal_utility,
    equal_utility_markdown,
)


def point(defense: str, setting: str, drop: float, leakage: float, verdict: str = "leaks") -> StrengthPoint:
    return StrengthPoint(defense, setting, drop, leakage, f"{leakage:.3f}", floor=0.1, verdict=verdict)


NOISE = [
    point("noise", "sigma 0.01", 0.5, 0.8),
    point("noise", "sigma 0.1", 2.5, 0.4),
    point("noise", "sigma 1", 9, 0.1),
]
CLIP = [point("clip", "norm 1", 4.0, 0.7), point("clip", "norm 0.1", 12.0, 0.05, "at floor")]


def test_each_budget_takes_the_lowest_leakage_within_it_and_none_when_every_strength_costs_more():
    table = equal_utility(NOISE + CLIP, budgets=(1, 3, 10))
    assert [table["noise"][b].setting for b in (1, 3, 10)] == ["sigma 0.01", "sigma 0.1", "sigma 1"]
    assert table["clip"][1] is None and table["clip"][3] is None
    assert table["clip"][10].setting == "norm 1"  # norm 0.1 leaks less but costs 12 points


def test_a_drop_equal_to_the_budget_is_within_it_and_a_negative_drop_is_within_every_budget():
    table = equal_utility([point("prune", "ratio 0.5", 3.0, 0.3), point("prune", "ratio 0.1", -0.4, 0.9)], (1, 3))
    assert table["prune"][1].setting == "ratio 0.1" and table["prune"][3].setting == "ratio 0.5"


def test_the_markdown_table_prints_leakage_floor_verdict_and_strength_or_none_at_this_cost():
    lines = equal_utility_markdown(equal_utility(NOISE + CLIP, budgets=(1, 3, 10)), budgets=(1, 3, 10))
    assert lines[0] == "| defense | drop <= 1 points | drop <= 3 points | drop <= 10 points |"
    assert lines[2].startswith("| noise | 0.800 (floor 0.100, leaks; sigma 0.01, drop 0.5) |")
    assert lines[3] == (
        f"| clip | {NONE_AT_THIS_COST} | {NONE_AT_THIS_COST} | 0.700 (floor 0.100, leaks; norm 1, drop 4.0) |"
    )
    assert cell_text(None) == NONE_AT_THIS_COST
