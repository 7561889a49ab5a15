"""Token classification batches: one label per word, at the word's first wordpiece.

A sentence longer than a row (`max_seq_length - 2` pieces) is read as
several rows of whole consecutive words (`fitting_windows`), so that no word
loses its tag: training learns every word, and evaluation and prediction tag
every word. (Served models read long texts in overlapping windows instead,
`kbert.tasks.token_classification.serving`; a text of one row is tagged
alike either way.)
"""

from __future__ import annotations

import weakref
from typing import Sequence

import numpy as np
import tensorflow as tf

from kbert.data.bucketing import batch_by_length
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.data.words import word_pieces


def token_classification_dataset(
    preprocessor: TextPreprocessor,
    sentences: Sequence[Sequence[str]],
    tag_ids: Sequence[Sequence[int]] | None,
    batch_size: int,
    is_training: bool = False,
    seed: int | None = None,
) -> tf.data.Dataset:
    """Token classification (NER) batches: one label per word, at its first wordpiece.

    Each word is tokenized on its own (`kbert.data.words.word_pieces`, as
    the served model does); its first wordpiece carries the word's tag with
    weight 1, other wordpieces and `[CLS]`/`[SEP]` weight 0. Words past
    `max_seq_length - 2` wordpieces are cut (they get no position).

    Args:
        preprocessor: `TextPreprocessor` (its `max_seq_length` bounds each row).
        sentences: list of word lists.
        tag_ids: list of tag-id lists (same shapes), or None.
        batch_size: int.
        is_training: bool. Shuffle (with `seed`) and repeat forever.
        seed: int or None.

    Returns:
        Dataset of dicts `token_ids`, `segment_ids`, `padding_mask`, `label`
        and `weight` (per position), `word_position` (word index + 1 at
        first wordpieces, 0 elsewhere) and `example_index`.

    Example:

    >>> batches = token_classification_dataset(preprocessor, [["EU", "rejects"]], [[3, 0]], 32)
    """
    count = len(sentences)
    words = tf.ragged.constant([list(s) for s in sentences], dtype=tf.string)
    if tag_ids is None:
        tag_ids = [[0] * len(s) for s in sentences]
    tags = tf.ragged.constant([list(t) for t in tag_ids], dtype=tf.int32)
    dataset = tf.data.Dataset.from_tensor_slices(
        {"words": words, "tags": tags, "example_index": tf.range(count, dtype=tf.int32)}
    )
    if is_training:
        dataset = dataset.shuffle(count, seed=seed, reshuffle_each_iteration=True).repeat()
    budget = preprocessor.max_seq_length - 2

    def encode(element):
        words = tf.RaggedTensor.from_row_lengths(element["words"], [tf.size(element["words"])])
        pieces, first, word = (rows[0] for rows in word_pieces(preprocessor, words))
        word_tags = tf.gather(element["tags"], word)
        word_numbers = word + 1
        token_ids = pieces[:budget]
        first = first[:budget]
        zero = tf.zeros([1], tf.int32)
        token_ids = tf.concat([[preprocessor.cls_id], token_ids, [preprocessor.sep_id]], 0)
        return {
            "token_ids": token_ids,
            "segment_ids": tf.zeros_like(token_ids),
            "padding_mask": tf.ones_like(token_ids),
            "label": tf.concat([zero, tf.where(first, word_tags[:budget], 0), zero], 0),
            "weight": tf.concat([zero, tf.cast(first, tf.int32), zero], 0),
            "word_position": tf.concat([zero, tf.where(first, word_numbers[:budget], 0), zero], 0),
            "example_index": element["example_index"],
        }

    dataset = dataset.map(encode, num_parallel_calls=tf.data.AUTOTUNE)
    max_seq_length = preprocessor.max_seq_length
    return batch_by_length(dataset, batch_size, max_seq_length).prefetch(tf.data.AUTOTUNE)


def fitting_windows(piece_counts: Sequence[int], budget: int) -> list[tuple[int, int]]:
    """Consecutive whole words that fit `budget` pieces together: `(start, end)` word ranges.

    Words are taken greedily left to right; a word longer than `budget` on its
    own is a window of its own (its pieces are cut, its tag kept at the first).

    Args:
        piece_counts: the pieces of each word, in order.
        budget: int. Pieces per window (`max_seq_length - 2`).

    Returns:
        list of `(start, end)` word ranges covering every word once, in order;
        `[(0, 0)]` for a sentence without words.

    Example:

    >>> fitting_windows([2, 3, 1, 4], 5)
    [(0, 2), (2, 3), (3, 4)]
    """
    windows, start, used = [], 0, 0
    for index, count in enumerate(piece_counts):
        if index > start and used + count > budget:
            windows.append((start, index))
            start, used = index, 0
        used += count
    windows.append((start, len(piece_counts)))
    return windows


_COUNTERS = weakref.WeakKeyDictionary()


def word_piece_counts(preprocessor: TextPreprocessor,
                      sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
    """How many pieces each word of each sentence is, tokenized as the dataset tokenizes it.

    Args:
        preprocessor: `TextPreprocessor`.
        sentences: list of word lists.

    Returns:
        list of int arrays, one per sentence.
    """
    count = _COUNTERS.get(preprocessor)
    if count is None:
        @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.string, 1, tf.int64)])
        def count(words):
            pieces, _, word = word_pieces(preprocessor, words)
            # Each piece's word, made flat over the batch's words.
            flat_word = word.flat_values + tf.gather(tf.cast(words.row_starts(), tf.int32),
                                                     tf.cast(pieces.value_rowids(), tf.int32))
            return tf.math.unsorted_segment_sum(tf.ones_like(flat_word), flat_word,
                                                tf.size(words.flat_values))

        _COUNTERS[preprocessor] = count
    counts = []
    for begin in range(0, len(sentences), 4096):
        block = [list(words) for words in sentences[begin:begin + 4096]]
        ragged = tf.RaggedTensor.from_row_lengths(
            tf.constant([w for words in block for w in words], tf.string),
            tf.constant([len(words) for words in block], tf.int64))
        flat = count(ragged).numpy()
        counts.extend(np.split(flat, np.cumsum([len(words) for words in block])[:-1]))
    return counts
