"""Whether a model learned: its accuracy against the constant predictor's interval on the test set."""

import numpy as np
import pytest

from fedsim.config import parse_config
from fedsim.reporting.chance import chance_from_labels, chance_level, chance_levels


def test_the_chance_level_is_the_majority_rate_with_its_wilson_interval():
    labels = np.array([0] * 30 + [1] * 20 + [2] * 50)
    level = chance_from_labels(labels)
    assert level.majority_rate == 0.5 and level.samples == 100
    # Wilson's 95 % interval for 50 of 100: 0.404 to 0.596
    assert level.low == pytest.approx(0.4038, abs=1e-3) and level.high == pytest.approx(0.5962, abs=1e-3)
    assert level.never_learned(0.55) and level.never_learned(0.2)  # inside, or below it: no better than constant
    assert not level.never_learned(0.62)


def test_a_model_at_chance_on_the_bundled_digits_never_learned_and_one_at_0_7_did():
    level = chance_level(parse_config({"data": {"dataset": "digits"}}))
    assert level is not None and level.samples > 100 and 0.09 < level.majority_rate < 0.13
    assert level.never_learned(0.11) and not level.never_learned(0.7)


def test_a_data_set_the_report_cannot_read_has_no_chance_level(tmp_path):
    arrays = tmp_path / "moved.npz"
    np.savez(arrays, x=np.zeros((20, 1, 8, 8), np.float32), y=np.arange(20) % 2)
    moved = parse_config({"data": {"dataset": "npz", "path": str(arrays)}})
    arrays.unlink()  # the run's data set was moved away after the run
    configs = {"a": moved, "b": parse_config({"data": {"dataset": "digits"}})}
    levels = chance_levels(configs)
    assert levels["a"] is None and levels["b"] is not None


def test_an_empty_test_set_is_refused():
    with pytest.raises(ValueError, match="empty"):
        chance_from_labels(np.array([], dtype=int))


def test_per_token_targets_give_the_majority_rate_over_the_tokens_without_padding():
    labels = np.array([[1, 1, 2, -100], [1, 3, -100, -100]])

    level = chance_from_labels(labels)

    assert level.samples == 5 and level.majority_rate == pytest.approx(3 / 5)
