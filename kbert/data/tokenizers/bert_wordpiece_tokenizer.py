"""BERT's tokenization as TensorFlow ops, shared by pre-training, fine-tuning and serving.

One construction for every place kbert turns text into ids, so that a model
sees the same ids for the same text when it is pre-trained
(`kbert.data.BertTokenizer`), fine-tuned (`kbert.data.TextPreprocessor` in tf.data) and
served (the same `TextPreprocessor` in the SavedModel).

tensorflow-text's `FastBertTokenizer` does BERT's basic tokenization (CJK
characters split out, punctuation split) and WordPiece in one C++ op, but its
own normalization differs from google-research/bert's
`tokenization.FullTokenizer`, which the published checkpoints were trained
with: its lower casing is NFKC case folding ("…" becomes "...", "ß" becomes
"ss", "ﬁ" becomes "fi", full-width letters become ASCII) and control
characters split words instead of vanishing. So `normalize_text` does the
original's normalization with TF string ops first and the tokenizer is built
without its own.
"""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf
import tensorflow_text as tf_text


def clean_text(text: tf.Tensor) -> tf.Tensor:
    """Drops control/format characters and U+FFFD like the original `_clean_text`.

    `FastBertTokenizer` treats U+0000, other control characters and U+FFFD as
    word breaks or unknown words, while the original BERT tokenizer deletes
    them (so "a\\x00b" is one word there). Two regex ops restore the original
    behaviour: tab/newline/CR become spaces, every other `\\p{C}` character
    and U+FFFD is removed.
    """
    text = tf.strings.regex_replace(text, r"[\t\n\r]", " ")
    return tf.strings.regex_replace(text, r"[\p{C}\x{FFFD}]", "")


def normalize_text(text: tf.Tensor, do_lower_case: bool) -> tf.Tensor:
    """The original BERT normalization: `clean_text`, then lower case, NFD and
    accent (`\\p{Mn}`) removal when `do_lower_case`."""
    text = clean_text(text)
    if do_lower_case:
        text = tf.strings.lower(text, encoding="utf-8")
        text = tf_text.normalize_utf8(text, "NFD")
        text = tf.strings.regex_replace(text, r"\p{Mn}", "")
    return text


# ASCII text needs none of NFD, accent stripping or Unicode lower casing, so
# `normalize_ascii` does the original's normalization of it with one
# `bytes.translate` (about 50x faster than the string ops): delete control
# characters except tab, line feed and carriage return (which the tokenizer
# splits on like spaces, as the original turns them into spaces) and map A-Z
# to a-z. `tests/data/test_tokenization.py` checks it against `normalize_text`.
_ASCII_CONTROL = bytes([*range(0, 9), 11, 12, *range(14, 32), 127])
_ASCII_LOWER = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")


def normalize_ascii(text: bytes, do_lower_case: bool) -> bytes:
    """`normalize_text` for ASCII bytes, in Python; tokenizes to the same ids.

    Args:
        text: bytes. ASCII only (`text.isascii()`).
        do_lower_case: bool. Map A-Z to a-z.

    Returns:
        The normalized bytes.

    Example:

    >>> normalize_ascii(b"Hello,\x00 World", do_lower_case=True)
    b'hello, world'
    """
    return text.translate(_ASCII_LOWER if do_lower_case else None, _ASCII_CONTROL)


class BertWordpieceTokenizer(tf.Module):
    """google-research/bert's tokenization in TensorFlow ops: normalization, then WordPiece.

    `normalize_text`, then `tensorflow_text.FastBertTokenizer` (basic
    tokenization and WordPiece) with its own normalization switched off. Runs
    in `tf.data` and inside an exported SavedModel (core and tensorflow-text
    ops only). Offsets from `tokenize_with_offsets` point into the text as
    given, not into its normalized form.

    Args:
        vocab: list of str. WordPiece tokens in id order; must contain `[UNK]`.
        do_lower_case: bool. Lower case and strip accents (uncased models).
            Defaults to True.
        token_out_type: `tf.DType`. `tf.int32` or `tf.int64`. Defaults to
            `tf.int32`.
        name: str. Module name.

    Example:

    >>> tokenizer = kbert.data.BertWordpieceTokenizer(vocab, do_lower_case=True)
    >>> tokenizer.tokenize(tf.constant(["Héllo, world…"]))
    <tf.RaggedTensor [[7592, 1010, 2088, 1529]]>
    """

    def __init__(self, vocab: Sequence[str], do_lower_case: bool = True,
                 token_out_type: tf.DType = tf.int32, name: str = "bert_wordpiece_tokenizer"):
        super().__init__(name=name)
        if "[UNK]" not in vocab:
            raise ValueError("The vocabulary lacks [UNK]; BERT's WordPiece needs it.")
        self.do_lower_case = bool(do_lower_case)
        # tensorflow-text's FastBertTokenizer is exactly these two (its `tokenize` runs the
        # normalizer, then the WordPiece tokenizer); kept apart so `tokenize_with_offsets`
        # maps the offsets back with one flat gather: FastBertTokenizer's own ragged
        # `gather(..., batch_dims=-1)` adds ~6 s to every trace of a function using it
        # (each export, twice), for the same values.
        self.normalizer = tf_text.FastBertNormalizer(lower_case_nfd_strip_accents=False)
        self.wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=list(vocab),
            suffix_indicator="##",
            token_out_type=token_out_type,
            unknown_token="[UNK]",
        )

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Returns the WordPiece ids of each string, `[batch] -> [batch, (pieces)]`."""
        return self.tokenize_normalized(normalize_text(texts, self.do_lower_case))

    def tokenize_normalized(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """`tokenize` for text already normalized (`normalize_text` or `normalize_ascii`)."""
        return self.wordpiece.tokenize(self.normalizer.normalize(texts))

    def tokenize_with_offsets(self, texts: tf.Tensor):
        """Tokenizes and returns where each piece is in the text as given.

        Args:
            texts: string `[batch]` of valid UTF-8.

        Returns:
            `(ids, starts, ends)`: ragged `[batch, (pieces)]` ids (the same as
            `tokenize`) and int64 byte offsets `[start, end)` of each piece in
            its text. A piece covers whole characters of the text: "é" stays
            one piece's two bytes although normalization leaves "e".
        """
        texts = tf.convert_to_tensor(texts, tf.string)
        ids, starts, ends = self.tokenize_normalized_with_offsets(
            normalize_text(texts, self.do_lower_case))
        return ids, *_source_offsets(texts, self.do_lower_case, starts, ends)

    def tokenize_normalized_with_offsets(self, texts: tf.Tensor):
        """`tokenize_normalized`, with int64 byte offsets `[start, end)` into `texts`.

        What tensorflow-text's `FastBertTokenizer.tokenize_with_offsets` returns.
        """
        normalized, offsets = self.normalizer.normalize_with_offsets(texts)
        ids, starts, ends = self.wordpiece.tokenize_with_offsets(normalized)
        return ids, _gather_in_rows(offsets, starts), _gather_in_rows(offsets, ends)


def _gather_in_rows(params: tf.RaggedTensor, indices: tf.RaggedTensor) -> tf.RaggedTensor:
    """`tf.gather(params, indices, batch_dims=1)` for ragged rows, as one flat gather."""
    rows = indices.value_rowids()
    flat = indices.flat_values + tf.gather(params.row_starts(), rows)
    return indices.with_flat_values(tf.gather(params.flat_values, flat))


def _source_offsets(texts, do_lower_case, starts, ends):
    # tensorflow-text maps offsets back only through its own normalization, so
    # normalize character by character to learn how many bytes each source
    # character becomes (0 when dropped), then look the pieces' offsets up.
    # Whole-text and per-character normalization give the same byte lengths
    # (the one context rule of lower casing, final sigma, swaps 2 bytes for 2).
    chars, char_starts = tf.strings.unicode_split_with_offsets(texts, "UTF-8")
    char_start = char_starts.flat_values
    row = char_starts.value_rowids()
    num_chars = tf.size(char_start, out_type=tf.int64)
    is_last = tf.range(num_chars) == tf.gather(char_starts.row_limits(), row) - 1
    row_bytes = tf.cast(tf.strings.length(texts), tf.int64)
    char_end = tf.where(is_last, tf.gather(row_bytes, row),
                        tf.concat([char_start[1:], tf.zeros([1], tf.int64)], 0)[:num_chars])
    normalized_bytes = tf.cast(
        tf.strings.length(normalize_text(chars.flat_values, do_lower_case)), tf.int64)
    # Offsets over the whole batch laid end to end, so one sorted search serves all rows.
    normalized_end = tf.cumsum(normalized_bytes)
    row_base = tf.cumsum(tf.math.unsorted_segment_sum(
        normalized_bytes, row, tf.shape(texts, out_type=tf.int64)[0]), exclusive=True)
    last = tf.maximum(num_chars - 1, 0)

    def source_char(offsets):
        flat = offsets.flat_values + tf.gather(row_base, offsets.value_rowids())
        return tf.minimum(tf.searchsorted(normalized_end, flat, side="right",
                                          out_type=tf.int64), last)

    source_starts = tf.gather(char_start, source_char(starts))
    source_ends = tf.gather(char_end, source_char(ends - 1))
    return starts.with_flat_values(source_starts), ends.with_flat_values(source_ends)
