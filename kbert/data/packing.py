"""Sequence packing: several short instances per row of `max_seq_length`, in tf.data.

Most rows of pre-training and fine-tuning data are shorter than
`max_seq_length`, and padding them costs as much compute as real tokens.
Packing puts several instances into one row (first-fit decreasing over a
window of instances, Graphcore's "packing without cross-contamination"):
each instance keeps its tokens and segment ids, gets `position_ids` that
restart at 0 and an `instance_ids` number (1, 2, ... in its row; 0 is
padding) from which the encoder builds a block-diagonal attention mask, so no
token attends outside its own instance and each instance's outputs are those
it would have alone. Per-instance values (labels, `[CLS]` positions) go to
`[rows, max_instances]` slots, predictions (masked-LM positions) to
`[rows, max_predictions]` slots shifted to the instance's place.

Why here and not in the data tool: the same stage packs pre-training
TFRecords from any tool (google-research/bert's too), statically or
dynamically masked ones (masks are drawn per instance before packing), and
fine-tuning data, which is tokenized in tf.data; it costs a sort and one
loop over lengths per window. Why hand-written: tf.data has bucketing but no
packing, tensorflow-text has none, and seqio's / tensor2tensor's packers need
their own ops and libraries and place only tokens (not predictions or
per-instance labels).
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class PackingConfig:
    """How rows are packed.

    Args:
        max_instances_per_row: int. Most instances in one row (the width of
            the per-instance outputs, e.g. NSP labels). Defaults to 4.
        max_predictions_per_row: int or None. Masked-LM predictions a row
            holds; None means `max_predictions_per_seq + max_instances_per_row`
            (15% of a full row plus rounding per instance). Defaults to None.
        window_size: int. Instances packed together (first-fit decreasing
            within a window); larger windows fill rows better. Defaults to
            1024.

    Example:

    >>> kbert.data.pretraining_dataset("data/*.tfrecord", 32, packing=kbert.data.PackingConfig())
    """

    max_instances_per_row: int = 4
    max_predictions_per_row: int | None = None
    window_size: int = 1024

    def validate(self) -> None:
        """Raises ValueError naming the setting that is out of range."""
        for name in ("max_instances_per_row", "window_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"PackingConfig.{name}={getattr(self, name)} must be at least 1.")
        if self.max_predictions_per_row is not None and self.max_predictions_per_row < 1:
            raise ValueError(f"PackingConfig.max_predictions_per_row="
                             f"{self.max_predictions_per_row} must be at least 1.")

    def predictions_per_row(self, max_predictions_per_seq: int) -> int:
        """The prediction slots of a row for data with `max_predictions_per_seq`."""
        if self.max_predictions_per_row is not None:
            return self.max_predictions_per_row
        return max_predictions_per_seq + self.max_instances_per_row


def first_fit_decreasing(lengths: tf.Tensor, predictions: tf.Tensor, row_length: int,
                         max_instances: int, max_predictions: int) -> dict[str, tf.Tensor]:
    """Assigns instances to rows: longest first, each into the first row it fits.

    A row holds at most `row_length` tokens, `max_instances` instances and
    `max_predictions` predictions.

    Args:
        lengths: int `[N]`. Tokens per instance (each at most `row_length`).
        predictions: int `[N]`. Predictions per instance (each at most
            `max_predictions`).
        row_length: int.
        max_instances: int.
        max_predictions: int.

    Returns:
        dict of int32 `[N]` tensors `row`, `offset` (first token in the row),
        `slot` (instance number in the row, from 0) and `prediction_offset`,
        and the scalar `num_rows`.

    Example:

    >>> first_fit_decreasing(tf.constant([5, 3, 4]), tf.constant([1, 1, 1]), 8, 2, 4)["row"]
    <tf.Tensor: ... numpy=array([0, 1, 1], dtype=int32)>
    """
    lengths = tf.cast(lengths, tf.int32)
    predictions = tf.cast(predictions, tf.int32)
    checks = [tf.debugging.assert_less_equal(
        lengths, row_length, message=f"an instance is longer than the packed row ({row_length})")]
    with tf.control_dependencies(checks):
        lengths = tf.identity(lengths)
    count = tf.shape(lengths)[0]
    order = tf.argsort(lengths, direction="DESCENDING", stable=True)

    def body(i, room, prediction_room, used, row, offset, slot, prediction_offset):
        k = order[i]
        length, wanted = lengths[k], predictions[k]
        fits = (room >= length) & (prediction_room >= wanted) & (used < max_instances)
        # Every row is open from the start; an unused one always fits.
        r = tf.argmax(tf.cast(fits, tf.int32), output_type=tf.int32)
        at = tf.one_hot(r, count, dtype=tf.int32)
        return (i + 1, room - at * length, prediction_room - at * wanted, used + at,
                tf.tensor_scatter_nd_update(row, [[k]], [r]),
                tf.tensor_scatter_nd_update(offset, [[k]], [row_length - room[r]]),
                tf.tensor_scatter_nd_update(slot, [[k]], [used[r]]),
                tf.tensor_scatter_nd_update(prediction_offset, [[k]],
                                            [max_predictions - prediction_room[r]]))

    zeros = tf.zeros([count], tf.int32)
    state = (tf.constant(0), zeros + row_length, zeros + max_predictions, zeros, zeros, zeros,
             zeros, zeros)
    _, _, _, used, row, offset, slot, prediction_offset = tf.while_loop(
        lambda i, *_: i < count, body, state)
    return {"row": row, "offset": offset, "slot": slot, "prediction_offset": prediction_offset,
            "num_rows": tf.reduce_sum(tf.cast(used > 0, tf.int32))}


def pack_window(window: dict[str, tf.Tensor], lengths: tf.Tensor, row_length: int,
                max_instances: int, sequence_keys: tuple[str, ...] = (),
                instance_keys: tuple[str, ...] = (), prediction_keys: tuple[str, ...] = (),
                position_key: str | None = None, max_predictions: int = 0,
                prediction_counts: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
    """Packs a window of instances (rows of a padded batch) into rows of `row_length`.

    Args:
        window: dict of tensors, one row per instance: `sequence_keys`
            `[N, S]` (token-aligned, S <= row_length), `instance_keys` `[N]`
            or `[N, 1]` (one value per instance), `prediction_keys` `[N, P]`
            (per prediction; zero padded).
        lengths: int `[N]`. Tokens of each instance.
        row_length: int. Tokens per packed row.
        max_instances: int. Instances per row.
        sequence_keys, instance_keys, prediction_keys: tuples of str.
        position_key: str or None. The prediction key holding token positions
            (shifted to the instance's place in the row).
        max_predictions: int. Prediction slots per row.
        prediction_counts: int `[N]` or None. Predictions per instance (the
            first ones of its prediction row); needed with `prediction_keys`.

    Returns:
        dict of `[R, ...]` tensors: each sequence key `[R, row_length]`,
        `instance_ids` and `position_ids` `[R, row_length]`, each instance
        key `[R, max_instances]`, `instance_positions` (first token of each
        instance) and `instance_weights` (1 for a filled slot) `[R,
        max_instances]`, each prediction key `[R, max_predictions]` and
        `prediction_weights`.

    Example:

    >>> rows = pack_window({"token_ids": ids, "label": labels}, lengths, 128, 4,
    ...                    sequence_keys=("token_ids",), instance_keys=("label",))
    """
    lengths = tf.cast(lengths, tf.int32)
    counts = (tf.zeros_like(lengths) if prediction_counts is None
              else tf.cast(prediction_counts, tf.int32))
    fit = first_fit_decreasing(lengths, counts, row_length, max_instances, max(max_predictions, 1))
    num_rows = fit["num_rows"]
    out: dict[str, tf.Tensor] = {}
    # Token (i, j) -> row position (row_i, offset_i + j).
    width = tf.shape(window[sequence_keys[0]])[1] if sequence_keys else tf.reduce_max(lengths)
    j = tf.range(width)[None, :]
    valid = j < lengths[:, None]
    token_index = tf.boolean_mask(
        tf.stack([tf.broadcast_to(fit["row"][:, None], tf.shape(valid)),
                  fit["offset"][:, None] + j], axis=-1), valid)
    shape = tf.stack([num_rows, row_length])
    for key in sequence_keys:
        out[key] = tf.scatter_nd(token_index, tf.boolean_mask(window[key], valid), shape)
    out["position_ids"] = tf.scatter_nd(
        token_index, tf.boolean_mask(tf.broadcast_to(j, tf.shape(valid)), valid), shape)
    out["instance_ids"] = tf.scatter_nd(
        token_index, tf.boolean_mask(tf.broadcast_to(fit["slot"][:, None] + 1, tf.shape(valid)),
                                     valid), shape)
    slot_index = tf.stack([fit["row"], fit["slot"]], axis=1)
    slots = tf.stack([num_rows, max_instances])
    for key in instance_keys:
        values = tf.reshape(window[key], [-1])
        out[key] = tf.scatter_nd(slot_index, values, slots)
    out["instance_positions"] = tf.scatter_nd(slot_index, fit["offset"], slots)
    out["instance_weights"] = tf.scatter_nd(slot_index, tf.ones_like(lengths, tf.float32), slots)
    if prediction_keys:
        _place_predictions(out, window, fit, counts, prediction_keys, position_key,
                           num_rows, max_predictions)
    return out


def _place_predictions(out, window, fit, counts, prediction_keys, position_key, num_rows,
                       max_predictions) -> None:
    """Moves each instance's first `counts` predictions to its slots of its row."""
    k = tf.range(tf.shape(window[prediction_keys[0]])[1])[None, :]
    valid = k < counts[:, None]
    index = tf.boolean_mask(
        tf.stack([tf.broadcast_to(fit["row"][:, None], tf.shape(valid)),
                  fit["prediction_offset"][:, None] + k], axis=-1), valid)
    shape = tf.stack([num_rows, max_predictions])
    for key in prediction_keys:
        values = window[key]
        if key == position_key:
            values = values + tf.cast(fit["offset"], values.dtype)[:, None]
        out[key] = tf.scatter_nd(index, tf.boolean_mask(values, valid), shape)
    out["prediction_weights"] = tf.scatter_nd(
        index, tf.ones([tf.shape(index)[0]], tf.float32), shape)

