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

Text whose labels are character spans (spaCy's and doccano's exports) puts
punctuation next to its entities ("in Paris."), so a token classification
task may also split each punctuation character off as a word of its own
(`split_punctuation=True`): google-research/bert's `BasicTokenizer` rule,
which Hugging Face's `BertPreTokenizer` keeps. `word_spans` finds the same
words in Python with their character offsets, for predictions that point
into the text.
"""

from __future__ import annotations

import unicodedata

import tensorflow as tf

from kbert.data.text_preprocessor import TextPreprocessor

# The characters Python's `str.isspace()` accepts, which `str.split()` (and so
# `read_conll`) splits on: ASCII tab to carriage return, the four information
# separators U+001C-U+001F, NEL U+0085 and Unicode's separators (category Z).
# tests/data/test_words.py checks it against `str.isspace` on every code point.
WHITESPACE = r"[\t\n\v\f\r\x1c-\x1f\x{85}\p{Z}]"
# BERT's `_is_punctuation`: every ASCII character that is neither a letter, a
# digit nor whitespace, and Unicode's punctuation (category P).
# tests/data/test_words.py checks it against `is_punctuation` on every code point.
PUNCTUATION = r"[!-/:-@\[-`{-~\p{P}]"


def is_punctuation(character: str) -> bool:
    """Whether a character is a word of its own with `split_punctuation` (BERT's rule).

    Args:
        character: str of length 1.

    Returns:
        bool.

    Example:

    >>> is_punctuation("$"), is_punctuation("\\u00bf"), is_punctuation("a")
    (True, True, False)
    """
    code = ord(character)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(character).startswith("P")


def word_spans(text: str, split_punctuation: bool = False) -> list[tuple[int, int]]:
    """The words of a text as `(start, end)` character offsets, `split_words`' rule in Python.

    Args:
        text: str.
        split_punctuation: bool. Each punctuation character is a word of its
            own (`is_punctuation`). Defaults to False (`str.split()`'s words).

    Returns:
        list of `(start, end)`: `text[start:end]` is each word, in order.

    Example:

    >>> word_spans("I flew to Paris.", split_punctuation=True)
    [(0, 1), (2, 6), (7, 9), (10, 15), (15, 16)]
    """
    spans = []
    start = None
    for index, character in enumerate(text):
        if character.isspace():
            if start is not None:
                spans.append((start, index))
                start = None
        elif split_punctuation and is_punctuation(character):
            if start is not None:
                spans.append((start, index))
                start = None
            spans.append((index, index + 1))
        elif start is None:
            start = index
    if start is not None:
        spans.append((start, len(text)))
    return spans


def split_words(texts: tf.Tensor, split_punctuation: bool = False) -> tf.RaggedTensor:
    """Splits texts into words as `str.split()` does: on runs of whitespace.

    Args:
        texts: string `[batch]`, valid UTF-8 (`TextPreprocessor.clean`).
        split_punctuation: bool. Each punctuation character is also a word of
            its own, as `word_spans(text, split_punctuation=True)` finds them.
            Defaults to False.

    Returns:
        Ragged string `[batch, (words)]`; each word is a substring of its text,
        unchanged.

    Example:

    >>> split_words(tf.constant(["U.S. troops  left\\u00a0on 1996-08-22"])).to_list()
    [[b'U.S.', b'troops', b'left', b'on', b'1996-08-22']]
    """
    # Every whitespace character becomes one ASCII space, which `tf.strings.split`
    # (ASCII whitespace only) then splits on, dropping empty words.
    if split_punctuation:
        texts = tf.strings.regex_replace(texts, PUNCTUATION, r" \0 ")
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
