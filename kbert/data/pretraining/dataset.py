"""tf.data reader for MLM+NSP pre-training TFRecords.

The on-disk format is google-research/bert's `create_pretraining_data.py` output
(feature names `input_ids`, `input_mask`, `segment_ids`, `masked_lm_positions`,
`masked_lm_ids`, `masked_lm_weights`, `next_sentence_labels`), so files written by
the original tool, Model Garden or `tools/create_pretraining_data.py` all read.
The reader renames them to the keras-hub input names the models take.
"""

from __future__ import annotations

import tensorflow as tf

from kbert.data.pretraining.metadata import list_data_files
from kbert.data.pretraining.tf_example import PRETRAINING_FEATURE_NAMES  # noqa: F401  (public here too)


def pretraining_feature_spec(
    max_seq_length: int, max_predictions_per_seq: int, next_sentence: bool = True
) -> dict[str, tf.io.FixedLenFeature]:
    """Returns the `tf.io.parse_example` spec of one pre-training example.

    Args:
        max_seq_length: int. Length of `input_ids`, `input_mask`, `segment_ids`.
        max_predictions_per_seq: int. Length of the `masked_lm_*` features.
        next_sentence: bool. Whether `next_sentence_labels` is present (False for
            RoBERTa-style data written with `--next_sentence=none`).

    Returns:
        A dict from feature name to `tf.io.FixedLenFeature`.
    """
    spec = {
        "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
    }
    if next_sentence:
        spec["next_sentence_labels"] = tf.io.FixedLenFeature([1], tf.int64)
    return spec


def pretraining_dataset(
    file_pattern: str | list[str],
    batch_size: int,
    max_seq_length: int = 128,
    max_predictions_per_seq: int = 20,
    next_sentence: bool = True,
    is_training: bool = True,
    shuffle_buffer_size: int = 1000,
    cycle_length: int = 8,
    seed: int | None = None,
    input_context: tf.distribute.InputContext | None = None,
) -> tf.data.Dataset:
    """Reads pre-training TFRecords into `(features, labels, sample_weights)` batches.

    Args:
        file_pattern: str or list of str. Comma-separated file names or globs
            (`gs://` works through `tf.io.gfile`).
        batch_size: int. Batch size of this input pipeline (per replica when
            called from `distribute_datasets_from_function`).
        max_seq_length: int. Must match the data. Defaults to 128.
        max_predictions_per_seq: int. Must match the data. Defaults to 20.
        next_sentence: bool. Whether to read and yield the NSP labels. Defaults
            to True.
        is_training: bool. Repeat forever and shuffle. Defaults to True.
        shuffle_buffer_size: int. Examples held for shuffling. Defaults to 1000.
        cycle_length: int. Files read at once. Defaults to 8.
        seed: int or None. Seed for file and example shuffling.
        input_context: `tf.distribute.InputContext` or None. Shards files (or
            examples, with fewer files than pipelines) across input pipelines.

    Returns:
        A `tf.data.Dataset` of `(features, labels, sample_weights)` where
        features has `token_ids`, `segment_ids`, `padding_mask` (int32
        [batch, max_seq_length]) and `mask_positions` (int32
        [batch, max_predictions_per_seq]); labels has `mlm` (and `nsp`);
        sample_weights has `mlm` (the `masked_lm_weights`) and `nsp` (ones).

    Example:

    >>> ds = kbert.data.pretraining_dataset("data/*.tfrecord", batch_size=32)
    >>> model.fit(ds, steps_per_epoch=1000)
    """
    files = list_data_files(file_pattern)
    spec = pretraining_feature_spec(max_seq_length, max_predictions_per_seq, next_sentence)
    dataset = tf.data.Dataset.from_tensor_slices(files)
    shard_examples = False
    if input_context and input_context.num_input_pipelines > 1:
        if len(files) >= input_context.num_input_pipelines:
            dataset = dataset.shard(
                input_context.num_input_pipelines, input_context.input_pipeline_id
            )
        else:
            shard_examples = True
    if is_training:
        dataset = dataset.shuffle(len(files), seed=seed).repeat()
    dataset = dataset.interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(cycle_length, len(files)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    if shard_examples:
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    if is_training:
        dataset = dataset.shuffle(shuffle_buffer_size, seed=seed)
    dataset = dataset.batch(batch_size, drop_remainder=is_training)
    dataset = dataset.map(
        lambda serialized: _to_model_inputs(tf.io.parse_example(serialized, spec), next_sentence),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return dataset.prefetch(tf.data.AUTOTUNE)


def _to_model_inputs(
    example: dict[str, tf.Tensor], next_sentence: bool
) -> tuple[dict[str, tf.Tensor], dict[str, tf.Tensor], dict[str, tf.Tensor]]:
    """Parsed google-research/bert features as the models' `(features, labels, sample_weights)`.

    Renames the on-disk features (`input_ids`, `input_mask`, ...) to the
    keras-hub input names the models take (`token_ids`, `padding_mask`, ...).
    """
    features = {
        "token_ids": tf.cast(example["input_ids"], tf.int32),
        "segment_ids": tf.cast(example["segment_ids"], tf.int32),
        "padding_mask": tf.cast(example["input_mask"], tf.int32),
        "mask_positions": tf.cast(example["masked_lm_positions"], tf.int32),
    }
    labels = {"mlm": tf.cast(example["masked_lm_ids"], tf.int32)}
    sample_weights = {"mlm": example["masked_lm_weights"]}
    if next_sentence:
        labels["nsp"] = tf.cast(example["next_sentence_labels"], tf.int32)
        # Keras wants a weight for every output once any is weighted.
        sample_weights["nsp"] = tf.ones_like(labels["nsp"][:, 0], tf.float32)
    return features, labels, sample_weights
