"""Text pairs (with optional hard negatives and scores) -> the dual encoder's training batches.

Each side is tokenized and packed on its own (`[CLS] text [SEP]`) with the one
`TextPreprocessor`, so training inputs equal what the exported towers see.
Batches are padded per side to their longest row; `negative_*` inputs hold
`num_negatives` texts per example, `[batch, num_negatives, length]`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import tensorflow as tf

from kbert.data.bucketing import batch_by_length
from kbert.data.text_preprocessor import TextPreprocessor


def _single(preprocessor: TextPreprocessor, texts: tf.Tensor, prefix: str) -> dict:
    token_ids, segment_ids = preprocessor.pack_ragged([preprocessor.tokenize(texts)])
    return {f"{prefix}_token_ids": token_ids, f"{prefix}_segment_ids": segment_ids,
            f"{prefix}_padding_mask": tf.ones_like(token_ids)}


def _grouped(preprocessor: TextPreprocessor, texts: tf.Tensor, prefix: str) -> dict:
    # [rows, n] texts -> [rows, n, (length)] ids: pack them flat, then regroup by row.
    width = tf.shape(texts, out_type=tf.int64)[1]
    flat = _single(preprocessor, tf.reshape(texts, [-1]), prefix)
    return {key: tf.RaggedTensor.from_uniform_row_length(value, width)
            for key, value in flat.items()}


def pair_dataset(
    preprocessor: TextPreprocessor,
    queries: Sequence[str],
    documents: Sequence[str],
    batch_size: int,
    negatives: Sequence[Sequence[str]] | None = None,
    scores: Sequence[float] | None = None,
    is_training: bool = False,
    seed: int | None = None,
) -> tf.data.Dataset:
    """Batches of (query, document[, negatives][, score]) for `kbert.models.BertDualEncoder`.

    Args:
        preprocessor: `TextPreprocessor`.
        queries: the first texts (anchors, queries).
        documents: the second texts (positives, documents).
        batch_size: int.
        negatives: per example, the same number of hard-negative texts; or None.
        scores: per example a graded score in [0, 1]; or None.
        is_training: bool. Shuffle (with `seed`) and repeat forever.
        seed: int or None.

    Returns:
        Dataset of dicts `query_*`, `document_*` (and `negative_*`) encoder
        inputs, `label` (the score, 0 without scores) and `example_index`.

    Example:

    >>> batches = pair_dataset(preprocessor, ["a cat"], ["a feline"], batch_size=32)
    """
    count = len(queries)
    columns = {"query": np.asarray(queries, dtype=object),
               "document": np.asarray(documents, dtype=object),
               "label": np.asarray(scores if scores is not None else [0.0] * count, np.float32),
               "example_index": np.arange(count, dtype=np.int32)}
    if negatives is not None:
        widths = {len(row) for row in negatives}
        if len(widths) != 1 or 0 in widths:
            raise ValueError(f"every example needs the same number (>= 1) of negatives; got {sorted(widths)}.")
        columns["negative"] = np.asarray([list(row) for row in negatives], dtype=object)
    dataset = tf.data.Dataset.from_tensor_slices(columns)
    if is_training:
        dataset = dataset.shuffle(count, seed=seed, reshuffle_each_iteration=True).repeat()

    def encode(batch):
        encoded = {**_single(preprocessor, batch["query"], "query"),
                   **_single(preprocessor, batch["document"], "document"),
                   "label": batch["label"], "example_index": batch["example_index"]}
        if "negative" in batch:
            encoded.update(_grouped(preprocessor, batch["negative"], "negative"))
        return encoded

    dataset = dataset.batch(256).map(encode, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    # Ragged [n, (length)] negatives become dense [n, length] before padded batching.
    dataset = dataset.map(lambda element: {
        key: value.to_tensor() if isinstance(value, tf.RaggedTensor) else value
        for key, value in element.items()})
    return batch_by_length(dataset, batch_size, preprocessor.max_seq_length,
                           bucket=False).prefetch(tf.data.AUTOTUNE)


def dual_encoder_batch(batch: dict, objective: str) -> tuple[dict, tf.Tensor]:
    """`(inputs, labels)` for `model.fit`: negatives flattened to `[batch * n, length]`.

    Labels are `range(batch)` for the ranking loss (query i's document is
    candidate i) and the graded scores for the cosine loss.
    """
    inputs = {key: value for key, value in batch.items()
              if key.startswith(("query_", "document_"))}
    for key, value in batch.items():
        if key.startswith("negative_"):
            inputs[key] = tf.reshape(value, [-1, tf.shape(value)[-1]])
    if objective == "ranking":
        return inputs, tf.range(tf.shape(batch["query_token_ids"])[0])
    return inputs, batch["label"]
