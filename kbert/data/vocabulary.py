"""The one reader of WordPiece `vocab.txt` files, with every check kbert makes of them.

A `vocab.txt` holds one token per line and a token's id is its line number, as
google-research/bert's `tokenization.load_vocab` reads it (each line stripped).
Pre-training data generation, fine-tuning, export, serving and checkpoint
conversion all read vocabularies here, so a bad file gets the same clear error
wherever it is used.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import tensorflow as tf

# What packing text into encoder inputs needs: padding, unknown words, [CLS] and [SEP].
INPUT_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")
# What masked-LM pre-training data needs.
PRETRAINING_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")


def read_vocab(vocab_file: str, required_tokens: Sequence[str] = (),
               purpose: str = "") -> list[str]:
    """Reads a `vocab.txt`: one token per line, the line number is its id.

    Args:
        vocab_file: str. Path (any `tf.io.gfile` path, so `gs://` works).
        required_tokens: sequence of str. Tokens the caller needs; a file
            without one of them is refused. Defaults to none.
        purpose: str. What needs `required_tokens`, ending the error message
            (e.g. "pre-training needs [UNK], [CLS], [SEP] and [MASK]").

    Returns:
        The tokens in id order.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: it is not UTF-8, is empty, repeats a token (the line of
            both is named) or lacks a required token.

    Example:

    >>> kbert.data.read_vocab("vocab.txt", required_tokens=kbert.data.INPUT_TOKENS)[:3]
    ['[PAD]', '[unused0]', '[unused1]']
    """
    _check_is_file(vocab_file)
    with tf.io.gfile.GFile(vocab_file, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"vocabulary file {vocab_file!r} is not UTF-8 ({e.reason}).") from None
    tokens = [line.strip() for line in text.split("\n")]
    while tokens and not tokens[-1]:
        tokens.pop()
    if not tokens:
        raise ValueError(f"vocabulary file {vocab_file!r} is empty.")
    _check_unique(tokens, vocab_file)
    present = set(tokens)
    missing = [token for token in required_tokens if token not in present]
    if missing:
        raise ValueError(
            f"vocabulary file {vocab_file!r} lacks {', '.join(missing)}"
            + (f"; {purpose}." if purpose else ".") + " Build one with tools/build_vocab.py.")
    return tokens


def vocab_sha256(vocab_file: str) -> str:
    """Returns the hex sha256 of a vocabulary file's bytes (recorded in data sidecars)."""
    _check_is_file(vocab_file)
    with tf.io.gfile.GFile(vocab_file, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _check_is_file(vocab_file: str) -> None:
    """Raises for a missing path, or a directory (where GFile would raise a raw op error)."""
    if not tf.io.gfile.exists(vocab_file):
        raise FileNotFoundError(f"vocabulary file {vocab_file!r} does not exist.")
    if tf.io.gfile.isdir(vocab_file):
        inside = tf.io.gfile.join(vocab_file, "vocab.txt")
        hint = (f"pass {inside}" if tf.io.gfile.exists(inside)
                else "pass the vocab.txt itself (tools/build_vocab.py writes one)")
        raise ValueError(f"vocabulary file {vocab_file!r} is a directory, not a vocab.txt; {hint}.")


def _check_unique(tokens: list[str], vocab_file: str) -> None:
    seen: dict[str, int] = {}
    for i, token in enumerate(tokens):
        if token in seen:
            raise ValueError(
                f"vocabulary file {vocab_file!r} line {i + 1} repeats {token!r} "
                f"(first on line {seen[token] + 1}).")
        seen[token] = i
