"""Token outputs -> one sentence vector: mean, `[CLS]` or max pooling, optionally L2-normalised."""

from __future__ import annotations

import keras
from keras import ops

POOLING_MODES = ("mean", "cls", "max")


@keras.saving.register_keras_serializable(package="kbert")
class SentencePooling(keras.layers.Layer):
    """Pools an encoder's `sequence_output` over real tokens into one vector per text.

    sentence-transformers' `Pooling` module, which keras-hub lacks: `mean`
    averages the token vectors where `padding_mask` is 1 (its default and
    all-MiniLM-L6-v2's), `cls` takes position 0, `max` takes the
    per-dimension maximum over real tokens. With `normalize` the result is
    L2-normalised (its `Normalize` module), so a dot product of two vectors
    is their cosine similarity. Output is float32 under mixed precision.

    Args:
        mode: str. `mean`, `cls` or `max`. Defaults to `mean`.
        normalize: bool. L2-normalise the pooled vector. Defaults to False.
        **kwargs: other keyword arguments passed to `keras.layers.Layer`.

    Example:

    >>> pooling = kbert.layers.SentencePooling("mean", normalize=True)
    >>> pooling(outputs["sequence_output"], inputs["padding_mask"]).shape
    (3, 384)

    Reference:
        - [Reimers & Gurevych, 2019](https://arxiv.org/abs/1908.10084)
    """

    def __init__(self, mode: str = "mean", normalize: bool = False, **kwargs):
        super().__init__(**kwargs)
        if mode not in POOLING_MODES:
            raise ValueError(f"pooling={mode!r}; expected one of {POOLING_MODES}.")
        self.mode = mode
        self.normalize = bool(normalize)

    def call(self, sequence_output, padding_mask):
        sequence = ops.cast(sequence_output, "float32")
        mask = ops.cast(padding_mask, "float32")[:, :, None]
        if self.mode == "cls":
            pooled = sequence[:, 0, :]
        elif self.mode == "max":
            # Padding must never win the maximum, as in sentence-transformers.
            pooled = ops.max(sequence + (mask - 1.0) * 1e9, axis=1)
        else:
            pooled = ops.sum(sequence * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1.0)
        if self.normalize:
            # F.normalize's epsilon: an all-zero vector stays zero instead of NaN.
            pooled = pooled / ops.maximum(ops.norm(pooled, axis=-1, keepdims=True), 1e-12)
        return pooled

    def compute_output_shape(self, sequence_shape, mask_shape=None):
        return (sequence_shape[0], sequence_shape[-1])

    def compute_output_spec(self, sequence_output, padding_mask):
        return keras.KerasTensor(self.compute_output_shape(sequence_output.shape), dtype="float32")

    def get_config(self):
        return {**super().get_config(), "mode": self.mode, "normalize": self.normalize}
