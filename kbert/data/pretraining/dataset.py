"""tf.data reader for MLM+NSP pre-training TFRecords.

The on-disk format is google-research/bert's `create_pretraining_data.py` output
(feature names `input_ids`, `input_mask`, `segment_ids`, `masked_lm_positions`,
`masked_lm_ids`, `masked_lm_weights`, `next_sentence_labels`), so files written by
the original tool, Model Garden or `tools/create_pretraining_data.py` all read.
The reader renames them to the keras-hub input names the models take.

Two options change what comes out: `masking="dynamic"` reads unmasked
instances (`create_pretraining_data --masking=dynamic`) and masks every batch
anew (`dynamic_masking.DynamicMasker`, keyed by seed, input pipeline and
batch number, so a checkpointed iterator resumes with the same masks); a
`PackingConfig` packs several instances into each row (`kbert.data.packing`).
"""

from __future__ import annotations

from typing import Any
from typing import Callable

import tensorflow as tf

from kbert.data.packing import PackingConfig
from kbert.data.packing import pack_window
from kbert.data.pretraining.checks import check_masking_mode
from kbert.data.pretraining.checks import check_recorded_lengths
from kbert.data.pretraining.checks import check_recorded_masking
from kbert.data.pretraining.dynamic_masking import DynamicMasker
from kbert.data.pretraining.dynamic_masking import MaskingConfig
from kbert.data.pretraining.instances import VocabInfo
from kbert.data.pretraining.metadata import list_data_files
from kbert.data.pretraining.metadata import read_pretraining_metadata
from kbert.data.pretraining.tf_example import PRETRAINING_FEATURE_NAMES  # noqa: F401  (public here too)


def pretraining_feature_spec(
    max_seq_length: int, max_predictions_per_seq: int, next_sentence: bool = True,
    masked_lm: bool = True,
) -> dict[str, tf.io.FixedLenFeature]:
    """Returns the `tf.io.parse_example` spec of one pre-training example.

    Args:
        max_seq_length: int. Length of `input_ids`, `input_mask`, `segment_ids`.
        max_predictions_per_seq: int. Length of the `masked_lm_*` features.
        next_sentence: bool. Whether `next_sentence_labels` is present (False for
            RoBERTa-style data written with `--next_sentence=none`).
        masked_lm: bool. Whether the `masked_lm_*` features are present
            (False for `--masking=dynamic` data). Defaults to True.

    Returns:
        A dict from feature name to `tf.io.FixedLenFeature`.
    """
    spec = {
        "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
    }
    if masked_lm:
        spec["masked_lm_positions"] = tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64)
        spec["masked_lm_ids"] = tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64)
        spec["masked_lm_weights"] = tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32)
    if next_sentence:
        spec["next_sentence_labels"] = tf.io.FixedLenFeature([1], tf.int64)
    return spec


def pretraining_dataset(
    file_pattern: str | list[str],
    batch_size: int,
    max_seq_length: int | None = None,
    max_predictions_per_seq: int | None = None,
    next_sentence: bool = True,
    is_training: bool = True,
    shuffle_buffer_size: int = 1000,
    cycle_length: int = 8,
    seed: int | None = None,
    input_context: tf.distribute.InputContext | None = None,
    masking: str = "static",
    masking_config: MaskingConfig | None = None,
    vocab_file: str | None = None,
    packing: PackingConfig | None = None,
    masking_rate: Callable[[tf.Tensor], tf.Tensor] | None = None,
) -> tf.data.Dataset:
    """Reads pre-training TFRecords into `(features, labels, sample_weights)` batches.

    The data's sidecar (`<file>.meta.json`), where there is one, must record
    the same `max_seq_length` and `masking`.

    Args:
        file_pattern: str or list of str. Comma-separated file names or globs
            (`gs://` works through `tf.io.gfile`).
        batch_size: int. Batch size of this input pipeline (per replica when
            called from `distribute_datasets_from_function`); packed rows
            with `packing`.
        max_seq_length: int or None. Must match the data. Defaults to the
            sidecar's, else 128.
        max_predictions_per_seq: int or None. Must match static data; the
            width of the masks dynamic masking draws. Defaults to the
            sidecar's, else 20.
        next_sentence: bool. Whether to read and yield the NSP labels. Defaults
            to True.
        is_training: bool. Repeat forever and shuffle. Defaults to True.
        shuffle_buffer_size: int. Examples held for shuffling. Defaults to 1000.
        cycle_length: int. Files read at once. Defaults to 8.
        seed: int or None. Seed for file and example shuffling and for
            dynamic masks (None: masks from seed 0).
        input_context: `tf.distribute.InputContext` or None. Shards files (or
            examples, with fewer files than pipelines) across input pipelines.
        masking: str. `"static"`: the masks in the files; `"dynamic"`: files
            from `--masking=dynamic`, masked anew for every batch. Defaults
            to "static".
        masking_config: `MaskingConfig` or None. Rate, split, whole words and
            n-grams of dynamic masking. Defaults to `MaskingConfig()`.
        vocab_file: str or None. The tokenizer file (`vocab.txt` or
            `tokenizer.json`) of dynamic masking; defaults to the one the
            sidecar names.
        packing: `PackingConfig` or None. Pack several instances per row
            (None: one instance per row, padded). Defaults to None.
        masking_rate: callable or None. Dynamic masking only: the rate of
            the instances read next, given the number of batches this
            pipeline yielded before them (an int64 scalar tensor; packed, the
            batch their window's first row lands in, so windows are then
            masked one after another); returns a float scalar tensor
            replacing `masking_config.masked_lm_prob` (a
            `dynamic_masking.MaskingSchedule` through the step, as
            `run_pretraining` builds it). A function of the position in the
            stream, which a checkpointed iterator keeps. Defaults to None.

    Returns:
        A `tf.data.Dataset` of `(features, labels, sample_weights)` where
        features has `token_ids`, `segment_ids`, `padding_mask` (int32
        [batch, max_seq_length]) and `mask_positions` (int32
        [batch, max_predictions_per_seq]); labels has `mlm` (and `nsp`
        [batch, 1]); sample_weights has `mlm` (the `masked_lm_weights`) and
        `nsp` (ones [batch]). Packed, features also have `instance_ids`,
        `position_ids` [batch, max_seq_length] and `cls_positions` [batch,
        max_instances_per_row]; `mask_positions`, `mlm` labels and weights
        are [batch, max_predictions_per_row] and `nsp` labels and weights
        [batch, max_instances_per_row] (weight 0 on empty slots).

    Example:

    >>> ds = kbert.data.pretraining_dataset("data/*.tfrecord", batch_size=32)
    >>> model.fit(ds, steps_per_epoch=1000)
    """
    files = list_data_files(file_pattern)
    metadata = read_pretraining_metadata(files)
    if max_seq_length is None:
        max_seq_length = (metadata or {}).get("max_seq_length") or 128
    if max_predictions_per_seq is None:
        max_predictions_per_seq = (metadata or {}).get("max_predictions_per_seq") or 20
    check_masking_mode(masking)
    if masking_rate is not None and masking != "dynamic":
        raise ValueError(f"a masking-rate schedule needs masking='dynamic' (masks drawn while "
                         f"reading), not masking={masking!r}.")
    check_recorded_lengths(metadata, max_seq_length, packing=packing)
    check_recorded_masking(metadata, masking)
    read = _instance_reader(metadata, max_seq_length, max_predictions_per_seq, next_sentence,
                            masking, masking_config, vocab_file, seed, input_context)
    records = _records(files, is_training, shuffle_buffer_size, cycle_length, seed, input_context)
    if packing is None:
        dataset = records.batch(batch_size, drop_remainder=is_training).enumerate()
        dataset = dataset.map(
            lambda n, serialized: _to_model_inputs(
                read(serialized, n, masking_rate(n) if masking_rate else None)),
            num_parallel_calls=tf.data.AUTOTUNE)
        if not is_training and not (input_context and input_context.num_input_pipelines > 1):
            # A known length: Keras' evaluate()/fit(validation_data=...) then ends
            # the pass without an "input ran out of data" warning.
            batches = -(-_count_records(files) // batch_size)
            dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    else:
        packing.validate()
        pack = _packer(packing, max_seq_length, max_predictions_per_seq, next_sentence)
        windows = records.batch(packing.window_size)
        if masking_rate is None:
            dataset = windows.enumerate().map(lambda n, serialized: pack(read(serialized, n)),
                                              num_parallel_calls=tf.data.AUTOTUNE)
        else:
            dataset = _packed_with_rates(windows, read, pack, masking_rate, batch_size)
        dataset = dataset.unbatch().batch(batch_size, drop_remainder=is_training)
        dataset = dataset.map(_to_packed_model_inputs, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)


def _packed_with_rates(windows: tf.data.Dataset, read, pack,
                       masking_rate: Callable[[tf.Tensor], tf.Tensor],
                       batch_size: int) -> tf.data.Dataset:
    """Windows masked at the rate of the batch their first row lands in, then packed.

    How many rows a window packs into depends on its masks, so the rows
    before a window are known only once the windows before it are packed: a
    `scan` (whose state the iterator's checkpoint keeps) counts them.
    """

    def pack_next(state, serialized):
        number, rows_before = state
        rows = pack(read(serialized, number, masking_rate(rows_before // batch_size)))
        count = tf.shape(rows["token_ids"], out_type=tf.int64)[0]
        return (number + 1, rows_before + count), rows

    start = (tf.constant(0, tf.int64), tf.constant(0, tf.int64))
    return windows.scan(start, pack_next)


def _records(files: list[str], is_training: bool, shuffle_buffer_size: int, cycle_length: int,
             seed: int | None, input_context: tf.distribute.InputContext | None) -> tf.data.Dataset:
    """The serialized examples of this input pipeline, shuffled (and repeated) for training."""
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
    return dataset


def _count_records(files: list[str]) -> int:
    """The number of records in `files` (per-file sidecars' counts, else one pass over them)."""
    total = 0
    for path in files:
        recorded = (read_pretraining_metadata([path]) or {}).get("num_instances_in_file")
        if recorded is None:
            recorded = int(tf.data.TFRecordDataset(path).reduce(
                tf.constant(0, tf.int64), lambda count, _: count + 1))
        total += int(recorded)
    return total


def _instance_reader(metadata, max_seq_length, max_predictions_per_seq, next_sentence, masking,
                     masking_config, vocab_file, seed, input_context):
    """Returns `read(serialized [N], batch_number, rate=None)`: parsed (and dynamically masked)
    instances, at `rate` when given.

    The result is a dict of `[N, ...]` tensors: `token_ids`, `segment_ids`,
    `padding_mask`, `mask_positions`, `mlm_ids`, `mlm_weights` and, with
    `next_sentence`, `nsp` `[N]`.
    """
    spec = pretraining_feature_spec(max_seq_length, max_predictions_per_seq, next_sentence,
                                    masked_lm=masking == "static")
    masker = None
    if masking == "dynamic":
        masker = DynamicMasker(_vocab_info(vocab_file, metadata), max_predictions_per_seq,
                               masking_config)
        pipeline = input_context.input_pipeline_id if input_context else 0
        base_seed = tf.random.experimental.stateless_fold_in(
            tf.constant([0 if seed is None else seed, 0], tf.int64), pipeline)

    def read(serialized, batch_number, rate=None):
        example = tf.io.parse_example(serialized, spec)
        instances = {
            "token_ids": tf.cast(example["input_ids"], tf.int32),
            "segment_ids": tf.cast(example["segment_ids"], tf.int32),
            "padding_mask": tf.cast(example["input_mask"], tf.int32),
        }
        if masker is None:
            instances["mask_positions"] = tf.cast(example["masked_lm_positions"], tf.int32)
            instances["mlm_ids"] = tf.cast(example["masked_lm_ids"], tf.int32)
            instances["mlm_weights"] = example["masked_lm_weights"]
        else:
            masked, positions, labels, weights = masker(
                instances["token_ids"], tf.reduce_sum(instances["padding_mask"], axis=1),
                tf.random.experimental.stateless_fold_in(base_seed, batch_number), rate)
            instances.update(token_ids=masked, mask_positions=positions, mlm_ids=labels,
                             mlm_weights=weights)
        if next_sentence:
            instances["nsp"] = tf.cast(example["next_sentence_labels"][:, 0], tf.int32)
        return instances

    return read


def _vocab_info(vocab_file: str | None, metadata: dict[str, Any] | None) -> VocabInfo:
    """The special ids and word continuations of the tokenizer dynamic masking uses."""
    vocab_file = vocab_file or (metadata or {}).get("vocab_file")
    if not vocab_file or not tf.io.gfile.exists(vocab_file):
        raise ValueError(
            f"masking='dynamic' needs the tokenizer file ([CLS], [SEP], [MASK] and the pieces "
            f"that continue words) but "
            f"{'none is named' if not vocab_file else repr(vocab_file) + ' does not exist'}; pass "
            "vocab_file= (kbert-pretrain: --vocab_file, a vocab.txt or tokenizer.json).")
    return VocabInfo.from_file(vocab_file)


def _packer(packing: PackingConfig, max_seq_length: int, max_predictions_per_seq: int,
            next_sentence: bool):
    """Returns `pack(instances)`: a window of `_instance_reader` output as packed rows."""
    max_predictions = packing.predictions_per_row(max_predictions_per_seq)

    def pack(instances):
        lengths = tf.reduce_sum(instances["padding_mask"], axis=1)
        counts = tf.cast(tf.reduce_sum(instances["mlm_weights"], axis=1), tf.int32)
        return pack_window(
            instances, lengths, max_seq_length, packing.max_instances_per_row,
            sequence_keys=("token_ids", "segment_ids", "padding_mask"),
            instance_keys=("nsp",) if next_sentence else (),
            prediction_keys=("mask_positions", "mlm_ids"), position_key="mask_positions",
            max_predictions=max_predictions, prediction_counts=counts)

    return pack


def _to_model_inputs(instances: dict[str, tf.Tensor]):
    """Unpacked instances as the models' `(features, labels, sample_weights)`."""
    features = {key: instances[key]
                for key in ("token_ids", "segment_ids", "padding_mask", "mask_positions")}
    labels = {"mlm": instances["mlm_ids"]}
    sample_weights = {"mlm": instances["mlm_weights"]}
    if "nsp" in instances:
        labels["nsp"] = instances["nsp"][:, None]
        # Keras wants a weight for every output once any is weighted.
        sample_weights["nsp"] = tf.ones_like(instances["nsp"], tf.float32)
    return features, labels, sample_weights


def _to_packed_model_inputs(rows: dict[str, tf.Tensor]):
    """Packed rows as the models' `(features, labels, sample_weights)`."""
    features = {key: rows[key] for key in ("token_ids", "segment_ids", "padding_mask",
                                           "instance_ids", "position_ids", "mask_positions")}
    features["cls_positions"] = rows["instance_positions"]
    labels = {"mlm": rows["mlm_ids"]}
    sample_weights = {"mlm": rows["prediction_weights"]}
    if "nsp" in rows:
        labels["nsp"] = rows["nsp"]
        sample_weights["nsp"] = rows["instance_weights"]
    return features, labels, sample_weights
