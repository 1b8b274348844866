"""The plateau criterion: training stops after ``patience`` evaluations in a row that do not beat the best by more
than ``min_delta``; the accuracy at the plateau is the best one by then."""

import pytest

from fedsim.core.plateau import first_reaching, plateau_of


def test_the_plateau_is_the_evaluation_ending_patience_evaluations_without_improvement():
    accuracies = [0.1, 0.5, 0.9, 0.905, 0.904, 0.9, 0.95]
    plateau = plateau_of(accuracies, patience=3, min_delta=0.01)  # 0.905 does not beat 0.9 by more than 0.01
    assert plateau is not None
    assert (plateau.index, plateau.best_index, plateau.best_accuracy) == (5, 2, 0.9)
    assert plateau.accuracy == pytest.approx((0.905 + 0.904 + 0.9) / 3)  # the level of the evaluations that waited


def test_the_accuracy_at_the_plateau_is_where_a_degrading_model_settled_not_where_it_started():
    plateau = plateau_of([0.98, 0.95, 0.93, 0.92], patience=3, min_delta=0.001)
    assert plateau.best_accuracy == 0.98 and plateau.accuracy == pytest.approx((0.95 + 0.93 + 0.92) / 3)


def test_an_improvement_by_more_than_min_delta_restarts_the_wait():
    accuracies = [0.1, 0.5, 0.5, 0.6, 0.6, 0.6]
    assert plateau_of(accuracies, patience=2, min_delta=0.0).index == 5
    assert plateau_of(accuracies, patience=3, min_delta=0.0) is None  # still improving two evaluations ago


def test_a_lull_before_not_before_does_not_count_unless_it_lasts_until_then():
    accuracies = [0.1, 0.1, 0.1, 0.8, 0.8, 0.8, 0.8]
    assert plateau_of(accuracies, patience=2, min_delta=0.0).index == 2
    assert plateau_of(accuracies, patience=2, min_delta=0.0, not_before=4).index == 5
    still_flat = plateau_of([0.5, 0.5, 0.5, 0.5, 0.5], patience=2, min_delta=0.0, not_before=4)
    assert (still_flat.index, still_flat.best_index) == (4, 0)


def test_a_bad_criterion_is_refused_with_its_values():
    with pytest.raises(ValueError, match="patience = 0"):
        plateau_of([0.5], patience=0, min_delta=0.0)


def test_rounds_to_target_is_the_first_evaluation_at_or_above_it():
    assert first_reaching([0.2, 0.96, 0.97, 0.98], 0.97) == 2
    assert first_reaching([0.2, 0.5], 0.97) is None
