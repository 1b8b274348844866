import numpy as np
import pytest

from fedsim.judge.text_floor import public_mode, text_floor, text_row
from fedsim.judge.text_scoring import score_text


def test_an_exact_recovery_in_another_order_scores_one_everywhere():
    truth = [[5, 6, 7], [8, 9]]
    assert score_text([[8, 9], [5, 6, 7]], truth) == {
        "exact": 1.0,
        "token_accuracy": 1.0,
        "rouge1": 1.0,
        "rouge2": 1.0,
        "rougeL": 1.0,
    }


def test_one_wrong_token_costs_exactness_but_little_rouge():
    scores = score_text([[5, 6, 4]], [[5, 6, 7]])
    assert scores["exact"] == 0.0
    assert scores["token_accuracy"] == pytest.approx(2 / 3)
    assert scores["rouge1"] == pytest.approx(2 / 3) and scores["rouge2"] == pytest.approx(0.5)


def test_a_missing_sequence_scores_zero():
    assert score_text([[5, 6, 7]], [[5, 6, 7], [8, 9]])["exact"] == 0.5


def test_the_public_mode_is_the_commonest_token_at_each_position():
    assert public_mode([[1, 2, 3], [1, 4, 3], [2, 4]]) == [1, 4, 3]


def test_an_exact_recovery_leaks_and_a_public_sentence_does_not():
    rng = np.random.default_rng(0)
    public = [[int(t) for t in rng.integers(3, 30, size=5)] for _ in range(200)]
    truth = [[3, 4, 5, 6], [7, 8, 9, 10]]
    floor = text_floor(truth, public, count=2, rng=np.random.default_rng(1), draws=99)

    assert floor.verdict(score_text(truth, truth)["rougeL"]) == "leaks"
    assert floor.verdict(score_text(public[:2], truth)["rougeL"]) == "at floor"
    assert 0 < floor.value("rouge1") < 1  # public sentences share some tokens with the target


def test_label_informed_guesses_join_the_floor_when_labels_are_given():
    public = [[1, 2], [3, 4], [1, 2], [3, 4]]
    floor = text_floor([[1, 2]], public, 1, np.random.default_rng(0), 19, truth_labels=[0], public_labels=[0, 1, 0, 1])
    assert [family.name for family in floor.families] == ["public-mode", "random-public", "label-public"]
    # a class holding only the target's sentence: the label alone recovers it, so exact recovery is at floor
    assert floor.verdict(1.0) == "at floor"


def test_a_row_carries_the_scores_the_floor_and_the_verdict():
    truth = np.array([[3, 4, 5, 0], [6, 7, 0, 0]])
    public = np.array([[8, 9, 10, 0]] * 10 + [[11, 12, 0, 0]] * 10)
    row = text_row(truth[::-1], truth, public, pad_id=0, rng=np.random.default_rng(0), draws=19)
    assert row["exact_mean"] == 1.0 and row["verdict"] == "leaks" and row["floor_rougeL"] is not None
