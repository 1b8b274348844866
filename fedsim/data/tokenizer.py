"""The tokenizer of a text data set: trained here on the training texts, or read from a file or the hub.

A trained tokenizer is word level (``tokenizers``' WordLevel on whitespace and punctuation): the most frequent
words of the training texts up to ``vocab_size``, with ``[PAD]`` = 0, ``[EOS]`` = 1 and ``[UNK]`` = 2. It needs
nothing but the texts, so tests and offline runs use it; users name a hub tokenizer (``gpt2``) or a
``tokenizer.json`` for a pretrained model's vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedsim.data.base import DataError

PAD, EOS, UNK = "[PAD]", "[EOS]", "[UNK]"
#: end-of-sequence tokens of common hub tokenizers, tried in order when the tokenizer has no [EOS]
_HUB_EOS = ("[EOS]", "<|endoftext|>", "</s>", "[SEP]", "<eos>")


@dataclass(frozen=True)
class TextTokenizer:
    """A ``tokenizers.Tokenizer`` with the ids the data pipeline needs (padding, end of sequence)."""

    backend: Any  # tokenizers.Tokenizer
    pad_id: int
    eos_id: int

    @property
    def vocab_size(self) -> int:
        return int(self.backend.get_vocab_size())

    def encode(self, text: str) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return self.backend.decode(ids, skip_special_tokens=False)

    def tokens(self, ids: list[int]) -> list[str]:
        """Each id's token string (what token-level scores compare)."""
        return [self.backend.id_to_token(int(i)) or "" for i in ids]


def train_tokenizer(texts: list[str], vocab_size: int) -> TextTokenizer:
    """A word-level tokenizer of the most frequent words of ``texts`` (deterministic: ties broken by the word)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    backend = Tokenizer(models.WordLevel(unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace()])
    backend.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces, as they were split
    trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, special_tokens=[PAD, EOS, UNK], show_progress=False)
    backend.train_from_iterator(texts, trainer=trainer)
    pad_id, eos_id = backend.token_to_id(PAD), backend.token_to_id(EOS)
    assert pad_id is not None and eos_id is not None  # special tokens are always in the trained vocabulary
    return TextTokenizer(backend, pad_id=pad_id, eos_id=eos_id)


def read_tokenizer(name: str) -> TextTokenizer:
    """A tokenizer.json (or a folder holding one), else a hub tokenizer; one line when neither can be read."""
    from tokenizers import Tokenizer

    path = Path(name).expanduser()
    if path.is_dir():
        path = path / "tokenizer.json"
    try:
        backend = Tokenizer.from_file(str(path)) if path.is_file() else Tokenizer.from_pretrained(name)
    except Exception as error:  # tokenizers raises a bare Exception for an unreachable hub or an unknown name
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DataError(
            f"data.tokenizer = '{name}': no tokenizer.json there and the hub cannot give it ({first}); "
            "use `train`, or a local tokenizer.json"
        ) from None
    eos = next((backend.token_to_id(token) for token in _HUB_EOS if backend.token_to_id(token) is not None), None)
    if eos is None:
        raise DataError(f"data.tokenizer = '{name}': it has no end-of-sequence token (tried {', '.join(_HUB_EOS)})")
    pad = backend.token_to_id(PAD)
    # a causal hub tokenizer (GPT-2) has no padding token: padding reuses end-of-sequence, and targets there are
    # ignored, so it never trains as one
    return TextTokenizer(backend, pad_id=eos if pad is None else pad, eos_id=eos)


def load_tokenizer(name: str, texts: list[str], vocab_size: int) -> TextTokenizer:
    """``train`` -> trained on ``texts``; else read from a file, a folder or the hub."""
    return train_tokenizer(texts, vocab_size) if name == "train" else read_tokenizer(name)
