"""A target's verdict comes from the attacker's own pick; the oracle stands beside it; cells count and test targets."""

import pytest

from fedsim.judge.floor import AT_FLOOR, LEAKS, UNKNOWN
from fedsim.judge.verdict import ATTACKER_PICK, CORRECTED_PICK, MIN_TARGETS, ONLY_ATTACK, judge_cell, judge_target


def _row(attack, ssim, p_value, match=None, **extra):
    return {
        "event": "attack",
        "status": "ok",
        "attack": attack,
        "ssim_mean": ssim,
        "gradient_match": match,
        "p_value": p_value,
        "p_values": {"random-public": p_value},
        "floor_ssim": 0.3,
        "floor_ssim_best_of": [0.3, 0.34, 0.37],
        "floor_level": 0.05,
        **extra,
    }


def test_the_attackers_pick_decides_even_where_another_attack_scored_higher_against_the_truth():
    judged = judge_target([_row("dlg", 0.2, 0.6, match=0.01), _row("ig", 0.9, 0.004, match=0.2)])
    assert (judged.selection, judged.pick["attack"], judged.verdict) == (ATTACKER_PICK, "dlg", AT_FLOOR)
    # the oracle: ig, read against the best of two guesses; an upper bound that decides nothing
    assert judged.oracle["attack"] == "ig" and judged.oracle_floor == 0.34
    assert judged.oracle_p_value == pytest.approx(1 - 0.996**2) and judged.oracle_verdict == LEAKS


def test_an_attack_built_for_the_defense_in_force_is_picked_though_a_generic_one_matches_the_whole_update_better():
    # Soteria replaces the representation layer's entries: ig explains them too and matches the whole update
    # better, ig-soteria leaves them alone by design; the attacker, knowing the defense, reports ig-soteria's result
    generic = _row("ig", 0.1, 0.7, match=0.2, adapts_to=[])
    built_for_it = _row("ig-soteria", 0.8, 0.002, match=0.6, adapts_to=["soteria"])
    judged = judge_target([generic, built_for_it])
    assert (judged.selection, judged.pick["attack"], judged.verdict) == (ATTACKER_PICK, "ig-soteria", LEAKS)


def test_among_attacks_built_for_the_defense_the_lowest_gradient_match_is_picked():
    rows = [
        _row("ig", 0.9, 0.001, match=0.01, adapts_to=[]),
        _row("ig-prune", 0.2, 0.5, match=0.3, adapts_to=["prune"]),
        _row("ig-soteria", 0.6, 0.01, match=0.4, adapts_to=["soteria"]),
    ]
    assert judge_target(rows).pick["attack"] == "ig-prune"


def test_rows_recorded_before_runs_wrote_adapts_to_are_ranked_by_what_their_attack_declares():
    judged = judge_target([_row("ig", 0.1, 0.7, match=0.2), _row("ig-dropout@paper-004", 0.8, 0.002, match=0.6)])
    assert judged.pick["attack"] == "ig-dropout@paper-004"
    # an attack no longer registered models no defense
    assert judge_target([_row("ig", 0.1, 0.7, match=0.2), _row("gone", 0.8, 0.002, match=0.6)]).pick["attack"] == "ig"


def test_one_attack_is_its_own_pick():
    judged = judge_target([_row("dlg", 0.8, 0.01)])
    assert (judged.selection, judged.verdict, judged.candidates, judged.floor) == (ONLY_ATTACK, LEAKS, 1, 0.3)


def test_without_a_yardstick_the_best_p_value_is_corrected_for_the_selection():
    # two results at p 0.03: one alone would leak; the better of two guesses reaches it 1 - 0.97^2 = 5.9 % of the time
    judged = judge_target([_row("a", 0.5, 0.03), _row("b", 0.4, 0.2)])
    assert judged.selection == CORRECTED_PICK and judged.pick["attack"] == "a"
    assert judged.p_value == pytest.approx(1 - 0.97**2) and judged.verdict == AT_FLOOR
    assert judged.floor == 0.34  # the best-of-2 critical value


def test_failed_results_and_rows_without_a_test_do_not_count():
    failed = {"event": "attack", "status": "failed", "attack": "ig"}
    assert judge_target([failed]) is None
    older = {"event": "attack", "status": "ok", "attack": "dlg", "ssim_mean": 0.9}  # no p-value: no test
    assert judge_target([older, failed]).verdict == UNKNOWN


def test_a_cell_leaks_only_when_its_count_beats_what_guesses_reach_at_the_level():
    one_of_two = judge_cell([LEAKS, AT_FLOOR])
    assert one_of_two.verdict == AT_FLOOR and one_of_two.p_value == pytest.approx(1 - 0.95**2)
    three_of_thirty = judge_cell([LEAKS] * 3 + [AT_FLOOR] * 27)
    assert three_of_thirty.verdict == AT_FLOOR and three_of_thirty.powered  # 10 %: within what guesses reach
    six_of_thirty = judge_cell([LEAKS] * 6 + [AT_FLOOR] * 24)
    assert six_of_thirty.verdict == LEAKS and 0.07 < six_of_thirty.share_low < 0.2 < six_of_thirty.share_high
    assert not judge_cell([LEAKS] * 4).powered and "underpowered" in judge_cell([LEAKS] * 4).text()
    assert judge_cell([UNKNOWN]).verdict == UNKNOWN and MIN_TARGETS == 30
