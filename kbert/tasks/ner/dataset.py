"""Token classification batches: one label per word, at the word's first wordpiece."""

from __future__ import annotations

from typing import Sequence

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
