"""Length bucketing: batches of similar lengths, each padded to its own longest sequence.

Fine-tuning and evaluation batches are grouped by length so that little time
goes to padding up to `max_seq_length`; every element carries its index, so
results are put back in order afterwards.
"""

from __future__ import annotations

import tensorflow as tf


def bucket_boundaries(max_seq_length: int) -> list[int]:
    """Bucket upper bounds (exclusive) for `bucket_by_sequence_length`: 16, 32, 64, ... max+1."""
    boundaries = []
    bound = 16
    while bound < max_seq_length:
        boundaries.append(bound + 1)
        bound *= 2
    return boundaries + [max_seq_length + 1]


def batch_by_length(dataset: tf.data.Dataset, batch_size: int, max_seq_length: int,
                    bucket: bool = True) -> tf.data.Dataset:
    """Batches dict elements, padding each batch to its longest `token_ids`.

    Args:
        dataset: elements are dicts of 1-D (per position) and scalar tensors.
        batch_size: int.
        max_seq_length: int. Longest possible sequence.
        bucket: bool. Group elements of similar length first (training and
            evaluation order changes; each element carries its index). False
            keeps order.

    Returns:
        The batched dataset.

    Example:

    >>> batches = kbert.data.batch_by_length(dataset, batch_size=32, max_seq_length=128)
    """
    # `unbatch` and ragged slicing leave 1-D RaggedTensors, which padded
    # batching refuses; they are plain vectors, so make them dense.
    dataset = dataset.map(lambda element: {
        key: value.to_tensor() if isinstance(value, tf.RaggedTensor) else value
        for key, value in element.items()})
    if not bucket:
        return dataset.padded_batch(batch_size)
    boundaries = bucket_boundaries(max_seq_length)
    return dataset.bucket_by_sequence_length(
        element_length_func=lambda element: tf.shape(element["token_ids"])[0],
        bucket_boundaries=boundaries,
        bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
    )
