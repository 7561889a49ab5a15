"""Labelled sentences and sentence pairs -> packed, length-bucketed tf.data batches.

Tokenization and packing run inside tf.data with `TextPreprocessor` (the one the
exported SavedModels run), in groups of 256 texts per op call; batches are
bucketed by length and padded to their longest sequence.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import tensorflow as tf

from kbert.data.bucketing import batch_by_length
from kbert.data.packing import PackingConfig
from kbert.data.packing import pack_window
from kbert.data.text_preprocessor import TextPreprocessor


def classification_dataset(
    preprocessor: TextPreprocessor,
    texts_a: Sequence[str],
    texts_b: Sequence[str] | None,
    labels: Sequence[float] | None,
    batch_size: int,
    is_training: bool = False,
    regression: bool = False,
    seed: int | None = None,
    packing: PackingConfig | None = None,
) -> tf.data.Dataset:
    """Sentence (pair) classification or regression batches.

    Args:
        preprocessor: `TextPreprocessor` (its `max_seq_length` bounds each row).
        texts_a: first sentences.
        texts_b: second sentences, or None for single-sentence tasks.
        labels: class ids (or scores when `regression`), or None.
        batch_size: int.
        is_training: bool. Shuffle (with `seed`) and repeat forever.
        regression: bool. Labels are float32 scores instead of int32 ids.
        seed: int or None. Shuffle seed.
        packing: `PackingConfig` or None. Pack several examples per row of
            `max_seq_length` (training only; `kbert.data.packing`) instead of
            length bucketing. Defaults to None.

    Returns:
        Dataset of dicts `token_ids`, `segment_ids`, `padding_mask`, `label`,
        `example_index`. Packed: also `instance_ids`, `position_ids`,
        `cls_positions`, and `label`, `example_index`, `label_weight` are
        `[batch, max_instances_per_row]` (weight 0 on empty slots).

    Example:

    >>> batches = classification_dataset(preprocessor, ["a fine film"], None, [1], batch_size=32)
    """
    count = len(texts_a)
    columns = {
        "text_a": np.asarray(texts_a, dtype=object),
        "example_index": np.arange(count, dtype=np.int32),
        "label": np.asarray(labels if labels is not None else [0] * count,
                            dtype=np.float32 if regression else np.int32),
    }
    if texts_b is not None:
        columns["text_b"] = np.asarray(texts_b, dtype=object)
    dataset = tf.data.Dataset.from_tensor_slices(columns)
    if is_training:
        dataset = dataset.shuffle(count, seed=seed, reshuffle_each_iteration=True).repeat()

    def encode(batch):
        segments = [preprocessor.tokenize(batch["text_a"])]
        if "text_b" in batch:
            segments.append(preprocessor.tokenize(batch["text_b"]))
        token_ids, segment_ids = preprocessor.pack_ragged(segments)
        return {
            "token_ids": token_ids,
            "segment_ids": segment_ids,
            "padding_mask": tf.ones_like(token_ids),
            "label": batch["label"],
            "example_index": batch["example_index"],
        }

    # Tokenize in groups (one op call per 256 texts), then unbatch to bucket.
    dataset = dataset.batch(256).map(encode, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    max_seq_length = preprocessor.max_seq_length
    if packing is not None:
        return pack_examples(dataset, batch_size, max_seq_length, packing, ("label", "example_index"))
    return batch_by_length(dataset, batch_size, max_seq_length).prefetch(tf.data.AUTOTUNE)


def pack_examples(dataset: tf.data.Dataset, batch_size: int, max_seq_length: int,
                  packing: PackingConfig, instance_keys: tuple[str, ...]) -> tf.data.Dataset:
    """Packs encoded examples (dicts of 1-D token fields and per-example values) into rows.

    Args:
        dataset: unbatched dicts with `token_ids`, `segment_ids`,
            `padding_mask` and the `instance_keys` (scalars).
        batch_size: int. Packed rows per batch.
        max_seq_length: int. Tokens per row.
        packing: `PackingConfig`.
        instance_keys: tuple of str. Per-example values moved to instance slots.

    Returns:
        Batches of packed rows: the token fields, `instance_ids`,
        `position_ids`, `cls_positions`, each instance key and `label_weight`
        (1 on filled slots).
    """
    packing.validate()
    dataset = dataset.map(lambda element: {
        key: value.to_tensor() if isinstance(value, tf.RaggedTensor) else value
        for key, value in element.items()})

    def pack(window):
        rows = pack_window(window, tf.reduce_sum(window["padding_mask"], axis=1), max_seq_length,
                           packing.max_instances_per_row,
                           sequence_keys=("token_ids", "segment_ids", "padding_mask"),
                           instance_keys=instance_keys)
        rows["cls_positions"] = rows.pop("instance_positions")
        rows["label_weight"] = rows.pop("instance_weights")
        return rows

    dataset = dataset.padded_batch(packing.window_size).map(pack, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.unbatch().batch(batch_size).prefetch(tf.data.AUTOTUNE)


def count_truncated(preprocessor: TextPreprocessor, texts_a: Sequence[str],
                    texts_b: Sequence[str] | None = None) -> int:
    """How many texts (or pairs) have more pieces than `preprocessor.max_seq_length` holds.

    Counted with the same tokenizer and template as `classification_dataset`
    packs them, in tf.data, so that a run can say how many examples it cut.

    Args:
        preprocessor: `TextPreprocessor`.
        texts_a: first texts.
        texts_b: second texts, or None.

    Returns:
        int.

    Example:

    >>> count_truncated(preprocessor.with_max_seq_length(5), ["a gorgeous, moving film"])
    1
    """
    if not len(texts_a):
        return 0
    columns = {"a": np.asarray(texts_a, dtype=object)}
    if texts_b is not None:
        columns["b"] = np.asarray(texts_b, dtype=object)
    template = preprocessor.templates[len(columns) - 1]
    specials = len(template) - len(columns)

    def too_long(batch):
        pieces = sum(preprocessor.tokenize(batch[key]).row_lengths(axis=1) for key in sorted(batch))
        return tf.reduce_sum(tf.cast(pieces + specials > preprocessor.max_seq_length, tf.int64))

    dataset = tf.data.Dataset.from_tensor_slices(columns).batch(256).map(too_long)
    return int(dataset.reduce(tf.constant(0, tf.int64), lambda total, count: total + count))
