"""Packed rows in the models: the extra inputs, the block-diagonal mask, and the one way to run them.

A packed row holds several instances (`kbert.data.packing`). Besides the
three usual inputs it carries each token's `instance_ids` (1, 2, ...; 0 for
padding) and `position_ids` (restarting at 0 in each instance), and, for
models that read each instance's `[CLS]`, `cls_positions` `[batch,
instances]`.

A kbert model's functional graph takes the three usual inputs only, so that
`.keras` files and SavedModels stay as they are. A model that also takes
packed rows writes its forward pass once, as `_forward(inputs, training)`:
its `__init__` calls it on `keras.Input`s to build the graph, and
`PackedRows.call` calls it again, eagerly, when the inputs are packed. The
encoder does the same one level down, so its attention mask and positions
come from the packing inputs.
"""

from __future__ import annotations

from typing import Any

from keras import ops

# The inputs every encoder takes (keras-hub's names).
ENCODER_INPUTS = ("token_ids", "segment_ids", "padding_mask")
# The extra inputs of a packed row: each token's instance number (1, 2, ...;
# 0 padding) and its position within its instance. An encoder needs both.
PACKED_INPUTS = ("instance_ids", "position_ids")
# Optional with packed rows: each instance's first token, `[batch, instances]`.
# An encoder given it pools each instance (`pooled_output` `[batch,
# instances, hidden]`) instead of the row's first token.
CLS_POSITIONS = "cls_positions"


def is_packed(inputs: Any) -> bool:
    """Whether `inputs` is a dict holding packed rows (any of the packing inputs).

    Args:
        inputs: a model's inputs.

    Returns:
        True when `inputs` is a dict with `instance_ids`, `position_ids` or
        `cls_positions`.

    Example:

    >>> is_packed({"token_ids": ids, "instance_ids": instances})
    True
    """
    return isinstance(inputs, dict) and any(key in inputs for key in (*PACKED_INPUTS,
                                                                      CLS_POSITIONS))


def select_encoder_inputs(inputs: dict) -> dict:
    """The entries of a model's inputs that its encoder takes: the three, and packing ones present.

    Args:
        inputs: dict. A task model's or pre-trainer's inputs (with
            `mask_positions` and the like).

    Returns:
        A dict of `token_ids`, `segment_ids`, `padding_mask` and whichever of
        `instance_ids`, `position_ids`, `cls_positions` `inputs` has.
    """
    names = ENCODER_INPUTS + tuple(key for key in (*PACKED_INPUTS, CLS_POSITIONS)
                                   if key in inputs)
    return {key: inputs[key] for key in names}


def check_packed_inputs(inputs: dict) -> None:
    """Raises unless a packed row has both `instance_ids` and `position_ids`."""
    missing = [key for key in PACKED_INPUTS if key not in inputs]
    if missing:
        raise ValueError(f"a packed row needs both {PACKED_INPUTS}; {missing} missing.")


def packed_attention_mask(instance_ids):
    """The block-diagonal attention mask of packed rows: token i sees token j iff same instance.

    Args:
        instance_ids: int `[B, T]`. Instance number of each token, 0 for padding.

    Returns:
        int32 `[B, T, T]`: 1 where query i and key j belong to the same
        (non-padding) instance, 0 elsewhere.

    Example:

    >>> packed_attention_mask(np.array([[1, 1, 2, 0]]))[0]  # doctest: +SKIP
    [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]]
    """
    same = ops.equal(ops.expand_dims(instance_ids, 2), ops.expand_dims(instance_ids, 1))
    real = ops.not_equal(instance_ids, 0)
    both = ops.logical_and(ops.expand_dims(real, 2), ops.expand_dims(real, 1))
    return ops.cast(ops.logical_and(same, both), "int32")


def gather_positions(sequence, positions):
    """`sequence` `[B, T, H]` at `positions` `[B, N]`: `[B, N, H]` (each instance's `[CLS]`)."""
    return ops.take_along_axis(sequence, ops.expand_dims(ops.cast(positions, "int32"), -1),
                               axis=1)


class PackedRows:
    """Mixin of a functional kbert model that also takes packed rows, through its `_forward`.

    Put it before the Keras base class (`class M(PackedRows, keras.Model)`)
    and write the forward pass once as `_forward(inputs, training=None)`:
    `__init__` builds the functional graph with it from `keras.Input`s (the
    three usual inputs, so saved files are unchanged), and `call` runs it
    again on packed rows, where the encoder sees `instance_ids`,
    `position_ids` (and `cls_positions`). Unpacked inputs run the functional
    graph as before.

    Example:

    >>> class Tagger(PackedRows, TaskModel):
    ...     def __init__(self, encoder, **kwargs):
    ...         self.encoder = encoder
    ...         self.dense = keras.layers.Dense(2)
    ...         inputs = self._encoder_inputs()
    ...         super().__init__(inputs=inputs, outputs=self._forward(inputs), **kwargs)
    ...     def _forward(self, inputs, training=None):
    ...         encoded = self.encoder(select_encoder_inputs(inputs), training=training)
    ...         return self.dense(encoded["sequence_output"])
    """

    def call(self, inputs, training=None, mask=None):
        if is_packed(inputs):
            # Tensors throughout: Keras refuses a dict mixing numpy arrays and tensors.
            inputs = {key: ops.convert_to_tensor(value) for key, value in inputs.items()}
            return self._forward(inputs, training=training)
        return super().call(inputs, training=training, mask=mask)

    def _forward(self, inputs: dict, training=None):
        raise NotImplementedError(f"{type(self).__name__} does not define `_forward`.")
