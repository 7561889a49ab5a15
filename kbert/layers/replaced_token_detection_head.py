"""ELECTRA's discriminator head: one logit per token, "was this token replaced?"."""

from __future__ import annotations

import keras

from kbert.layers.activations import get_activation


@keras.saving.register_keras_serializable(package="kbert")
class ReplacedTokenDetectionHead(keras.layers.Layer):
    """Scores every token of the discriminator's sequence output as original or replaced.

    keras-hub has no ELECTRA pre-training head, so kbert provides one. It is the
    `discriminator_predictions` layer of google-research/electra: a dense layer
    of the encoder's width with the encoder's activation, then a dense layer to
    one logit per token (positive means "replaced"). The logits are float32
    under mixed precision so the sigmoid cross-entropy is computed in full
    precision.

    Args:
        activation: str. Activation of the first dense layer, by the names of
            `kbert.layers.get_activation`; pass the encoder's `activation`.
            Defaults to `"gelu_approximate"`.
        kernel_initializer: str, initializer or None. Initializer of the first
            dense layer; None means `TruncatedNormal(stddev=0.02)` as in
            ELECTRA. The output layer starts from Glorot-uniform, as the
            original's `tf.layers.dense` default. Defaults to None.
        **kwargs: other keyword arguments passed to `keras.layers.Layer`, such as
            `name` and `dtype`.

    Example:

    >>> head = kbert.layers.ReplacedTokenDetectionHead()
    >>> head(keras.ops.ones((3, 7, 32))).shape
    (3, 7)

    Reference:
        - [Clark et al., 2020](https://arxiv.org/abs/2003.10555)
    """

    def __init__(self, activation: str = "gelu_approximate", kernel_initializer=None, **kwargs):
        super().__init__(**kwargs)
        get_activation(activation)  # a clear error for an unknown name, now
        self.activation = activation
        if kernel_initializer is None:
            kernel_initializer = keras.initializers.TruncatedNormal(stddev=0.02)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        # Made in build(), where the width is known; "dense" first, as in the original.
        self.dense = self.output_dense = None

    def build(self, inputs_shape):
        self.dense = keras.layers.Dense(
            inputs_shape[-1],
            activation=get_activation(self.activation),
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name="dense",
        )
        self.output_dense = keras.layers.Dense(1, dtype=self.dtype_policy, name="output_dense")
        self.dense.build(inputs_shape)
        self.output_dense.build(inputs_shape)
        self.built = True

    def call(self, sequence_output):
        logits = self.output_dense(self.dense(sequence_output))
        return keras.ops.cast(keras.ops.squeeze(logits, axis=-1), "float32")

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape[:-1])

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(self.compute_output_shape(inputs.shape), dtype="float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "activation": self.activation,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
