"""One sentence a client trained on, and the tokens that random guesses get right (the text attacks' baseline)."""

from __future__ import annotations

import numpy as np
from text_corpus import one_step_view, text_data, tiny_gpt2


def one_sentence_view(folder, least_tokens: int = 5):
    """(data, row, view): a client's one SGD step on one sentence of ``least_tokens`` words or more, on a 2-block
    GPT-2 of width 32."""
    data = text_data(folder, max_length=8)
    row = int(np.argmax((data.x_train != data.pad_id).sum(1) >= least_tokens))
    return data, row, one_step_view(data, tiny_gpt2(data, hidden=32), [row])


def tokens_right(guess: np.ndarray, truth: np.ndarray, pad_id: int) -> int:
    real = truth != pad_id
    return int((guess[real] == truth[real]).sum())


def random_guesses_right(data, truth: np.ndarray, draws: int = 200) -> np.ndarray:
    """Tokens right of ``draws`` guesses drawn uniformly from the vocabulary (padding left out), seed 0."""
    rng = np.random.default_rng(0)
    guesses = rng.integers(1, data.vocab_size, size=(draws, len(truth)))
    return np.array([tokens_right(guess, truth, data.pad_id) for guess in guesses])
