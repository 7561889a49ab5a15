"""What a word is, in fine-tuning and in serving: one rule, in one place.

A CoNLL file has one word per line, and `read_conll` takes the first of the
line's whitespace-separated columns, so a training word never holds
whitespace and is otherwise whole: "U.S.", "1996-08-22" and "O'Neil" are one
word each. Fine-tuning tokenizes each word on its own and tags its first
piece. Serving finds the same words in raw text by splitting it where
`str.split()` does (`split_words`) and both go through `word_pieces`, so a
sentence sent as the CoNLL words joined by spaces gets the pieces, and the
first-piece positions, it was trained on. With a byte-level BPE (ModernBERT)
each word is tokenized after a space, as it reads in running text ("Ġworld"),
which is RoBERTa's `add_prefix_space` for words. The embedding task's `features`
signature reports each piece's word by the same rule.
"""

from __future__ import annotations

import tensorflow as tf

from kbert.data.text_preprocessor import TextPreprocessor

# The characters Python's `str.isspace()` accepts, which `str.split()` (and so
# `read_conll`) splits on: ASCII tab to carriage return, the four information
# separators U+001C-U+001F, NEL U+0085 and Unicode's separators (category Z).
# tests/data/test_words.py checks it against `str.isspace` on every code point.
WHITESPACE = r"[\t\n\v\f\r\x1c-\x1f\x{85}\p{Z}]"


def split_words(texts: tf.Tensor) -> tf.RaggedTensor:
    """Splits texts into words as `str.split()` does: on runs of whitespace.

    Args:
        texts: string `[batch]`, valid UTF-8 (`TextPreprocessor.clean`).

    Returns:
        Ragged string `[batch, (words)]`; each word is a substring of its text,
        unchanged.

    Example:

    >>> split_words(tf.constant(["U.S. troops  left\\u00a0on 1996-08-22"])).to_list()
    [[b'U.S.', b'troops', b'left', b'on', b'1996-08-22']]
    """
    # Every whitespace character becomes one ASCII space, which `tf.strings.split`
    # (ASCII whitespace only) then splits on, dropping empty words.
    return tf.strings.split(tf.strings.regex_replace(texts, WHITESPACE, " "))


def word_pieces(preprocessor: TextPreprocessor, words: tf.RaggedTensor):
    """Tokenizes each word on its own and lays each row's pieces end to end.

    Args:
        preprocessor: `TextPreprocessor`.
        words: ragged string `[batch, (words)]`.

    Returns:
        `(pieces, first, word)`: ragged `[batch, (pieces)]` int32 piece ids,
        whether each piece is its word's first, and the index within its row
        of the word each piece belongs to. A word with no pieces (only
        characters that normalization removes) has no first piece.

    Example:

    >>> pieces, first, word = word_pieces(preprocessor, tf.ragged.constant([["EU", "rejects"]]))
    >>> first.to_list(), word.to_list()
    ([[True, True]], [[0, 1]])
    """
    flat = words.flat_values
    if preprocessor.word_prefix:
        # Byte-level BPE: each word as it reads after a space in running text.
        flat = tf.strings.join([preprocessor.word_prefix, flat])
    per_word = preprocessor.tokenize(flat)  # [all words, (pieces)]
    per_word_length = tf.cast(per_word.row_lengths(), tf.int32)
    first = tf.equal(tf.ragged.range(per_word_length).flat_values, 0)
    word_in_row = tf.ragged.range(tf.cast(words.row_lengths(), tf.int32)).flat_values
    word = tf.repeat(word_in_row, per_word_length)
    row_lengths = tf.math.unsorted_segment_sum(per_word_length, words.value_rowids(), words.nrows())
    pieces = tf.RaggedTensor.from_row_lengths(per_word.flat_values, row_lengths)
    return pieces, pieces.with_flat_values(first), pieces.with_flat_values(word)
