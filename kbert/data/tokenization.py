"""Pre-training's tokenizer: vocabulary checks and Python lists around `BertWordpieceTokenizer`.

The ids come from `kbert.data.BertWordpieceTokenizer` (the original BERT
normalization, then tensorflow-text's `FastBertTokenizer`), the same
construction fine-tuning and serving use. It matches google-research/bert's
`tokenization.FullTokenizer` on punctuation, CJK characters, accents and
control characters (tested in `tests/data/test_tokenization.py`).
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np
import tensorflow as tf

from kbert.data.bert_wordpiece_tokenizer import BertWordpieceTokenizer

REQUIRED_SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")


def load_vocab(vocab_file: str) -> list[str]:
    """Reads a `vocab.txt`: one token per line, the line number is its id.

    Args:
        vocab_file: str. Path (any `tf.io.gfile` path).

    Returns:
        The tokens in id order.

    Raises:
        ValueError: if the file is missing, empty or repeats a token.
    """
    if not tf.io.gfile.exists(vocab_file):
        raise ValueError(f"--vocab_file: {vocab_file!r} does not exist.")
    with tf.io.gfile.GFile(vocab_file, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"--vocab_file: {vocab_file!r} is not UTF-8 ({e.reason}).") from None
    # Like the original tokenization.load_vocab: strip each line, keep order.
    tokens = [line.strip() for line in text.split("\n")]
    if tokens and not tokens[-1]:
        tokens.pop()
    if not tokens:
        raise ValueError(f"--vocab_file: {vocab_file!r} is empty.")
    seen: dict[str, int] = {}
    for i, token in enumerate(tokens):
        if token in seen:
            raise ValueError(
                f"--vocab_file: {vocab_file!r} line {i + 1} repeats {token!r} "
                f"(first on line {seen[token] + 1})."
            )
        seen[token] = i
    return tokens


def vocab_sha256(vocab_file: str) -> str:
    """Returns the hex sha256 of a vocabulary file's bytes."""
    with tf.io.gfile.GFile(vocab_file, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class BertTokenizer:
    """BERT WordPiece tokenizer built from a `vocab.txt`.

    A thin wrapper around `kbert.data.BertWordpieceTokenizer` that also checks
    the special tokens the pre-training tools need, knows their ids, and
    converts to Python lists for the example generator.

    Args:
        vocab_file: str. One token per line; must contain `[UNK]`, `[CLS]`,
            `[SEP]` and `[MASK]`.
        do_lower_case: bool. Lower case and strip accents (uncased models).
            Defaults to True.

    Example:

    >>> tokenizer = kbert.data.BertTokenizer("vocab.txt", do_lower_case=True)
    >>> tokenizer.tokenize_to_ids(["Hello, world!"])
    [[7592, 1010, 2088, 999]]
    """

    def __init__(self, vocab_file: str, do_lower_case: bool = True):
        self.vocab_file = vocab_file
        self.do_lower_case = do_lower_case
        self.vocab = load_vocab(vocab_file)
        self.token_to_id = {token: i for i, token in enumerate(self.vocab)}
        missing = [t for t in REQUIRED_SPECIAL_TOKENS if t not in self.token_to_id]
        if missing:
            raise ValueError(
                f"--vocab_file: {vocab_file!r} lacks {', '.join(missing)}; pre-training "
                "needs [UNK], [CLS], [SEP] and [MASK]. Build one with tools/build_vocab.py."
            )
        self.unk_id = self.token_to_id["[UNK]"]
        self.cls_id = self.token_to_id["[CLS]"]
        self.sep_id = self.token_to_id["[SEP]"]
        self.mask_id = self.token_to_id["[MASK]"]
        self.pad_id = self.token_to_id.get("[PAD]", 0)
        self._tokenizer = BertWordpieceTokenizer(self.vocab, do_lower_case, token_out_type=tf.int64)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def tokenize(self, text: tf.Tensor) -> tf.RaggedTensor:
        """Tokenizes a string tensor to int64 ids.

        Args:
            text: string `tf.Tensor` of shape `[batch]`.

        Returns:
            int64 `tf.RaggedTensor` of shape `[batch, (num_tokens)]` (word
            pieces of all words of a string, in order).
        """
        return self._tokenizer.tokenize(text)

    def tokenize_to_ids(self, lines: Sequence[str]) -> list[list[int]]:
        """Tokenizes Python strings to lists of ids (one list per line)."""
        if not lines:
            return []
        ids = self.tokenize(tf.constant(list(lines)))
        flat = ids.flat_values.numpy().tolist()
        splits = ids.row_splits.numpy()
        return [flat[a:b] for a, b in zip(splits[:-1].tolist(), splits[1:].tolist())]

    def tokenize_to_arrays(self, lines: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Tokenizes Python strings to `(flat_ids, row_splits)` numpy arrays."""
        ids = self.tokenize(tf.constant(list(lines)))
        return ids.flat_values.numpy(), ids.row_splits.numpy()

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return [self.vocab[i] for i in ids]
