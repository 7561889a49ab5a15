"""The next-sentence-prediction head of BERT pre-training."""

from __future__ import annotations

import keras


@keras.saving.register_keras_serializable(package="kbert")
class NextSentenceHead(keras.layers.Layer):
    """Predicts whether segment B follows segment A, from the pooled output.

    keras-hub has a masked-LM head but no NSP head, so kbert provides one. It is
    one dense layer to two logits over the encoder's pooled (`[CLS]`) output,
    the `cls/seq_relationship` layer of google-research/bert. Label 0 means B is
    the actual next segment, label 1 means B is a random segment. The logits are
    float32 under mixed precision so the loss is computed in full precision.

    Args:
        num_classes: int. Number of logits. Defaults to 2 (3 or more are used by
            some sentence-order variants).
        kernel_initializer: str, initializer or None. None means
            `TruncatedNormal(stddev=0.02)` as in BERT. Defaults to None.
        **kwargs: other keyword arguments passed to `keras.layers.Layer`, such as
            `name` and `dtype`.

    Example:

    >>> head = kbert.layers.NextSentenceHead()
    >>> head(keras.ops.ones((3, 32))).shape
    (3, 2)

    Reference:
        - [Devlin et al., 2019](https://arxiv.org/abs/1810.04805)
    """

    def __init__(self, num_classes: int = 2, kernel_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = num_classes
        if kernel_initializer is None:
            kernel_initializer = keras.initializers.TruncatedNormal(stddev=0.02)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.dense = keras.layers.Dense(
            num_classes,
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name="dense",
        )

    def build(self, inputs_shape):
        self.dense.build(inputs_shape)
        self.built = True

    def call(self, pooled_output):
        return keras.ops.cast(self.dense(pooled_output), "float32")

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape[:-1]) + (self.num_classes,)

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(self.compute_output_shape(inputs.shape), dtype="float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_classes": self.num_classes,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
