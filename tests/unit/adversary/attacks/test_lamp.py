import random

import numpy as np
import pytest
import torch
from text_guesses import one_sentence_view, random_guesses_right, tokens_right

from adversary.attacks.lamp import LampOptions, attack, candidates_of, reordering
from fedsim.config import parse_config
from fedsim.core.errors import ConfigError


def test_it_recovers_more_tokens_of_a_sentence_than_random_guesses_do(tmp_path):
    torch.set_num_threads(1)
    data, row, view = one_sentence_view(tmp_path)
    truth = data.x_train[row]
    options = LampOptions(iterations=100, restarts=1, discrete_every=25, candidates=4)

    (result,) = attack([view], options, seed=0, device=torch.device("cpu"))

    recovered = tokens_right(result.tokens[0].numpy(), truth, data.pad_id)
    assert recovered > np.quantile(random_guesses_right(data, truth), 0.95)


def test_every_transformation_is_a_permutation_of_the_positions():
    rng = random.Random(0)
    for _ in range(200):
        order = reordering(6, rng)
        assert sorted(order) == list(range(6))


def test_a_candidate_reorders_one_sequence_and_keeps_the_last_label():
    logits = torch.randn(2, 3, 6, 5)  # 2 restarts, 3 sequences of 5 tokens (+ the label after the last)

    candidates = candidates_of(logits, 4, random.Random(0))

    assert candidates.shape == (2, 5, 3, 6, 5)
    assert torch.equal(candidates[:, 0], logits)  # the unchanged tokens compete too
    assert torch.equal(candidates[..., -1, :], logits[:, None, :, -1, :].expand(-1, 5, -1, -1))
    changed = (candidates != logits[:, None]).flatten(3).any(-1).sum(-1)  # sequences changed per candidate
    assert changed.max() <= 1


def test_a_prior_that_cannot_be_read_is_one_line(tmp_path):
    _, _, view = one_sentence_view(tmp_path)
    options = LampOptions(iterations=1, prior=str(tmp_path / "no-such-model"))
    with pytest.raises(ValueError, match=r"^lamp prior = '.*no-such-model': cannot be loaded") as error:
        attack([view], options, seed=0, device=torch.device("cpu"))
    assert "\n" not in str(error.value)


def test_a_bad_option_is_one_line_naming_the_field():
    with pytest.raises(ConfigError) as error:
        parse_config({"adversary": {"attacks": [{"name": "lamp", "loss": "l3"}]}})
    assert "\n" not in str(error.value) and "loss" in str(error.value)
