"""Keras's Dropout with masks from 16-bit random draws."""

from __future__ import annotations

import keras
import tensorflow as tf

_BITS = 16


@keras.saving.register_keras_serializable(package="kbert")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` whose mask costs half the random numbers.

    Keras draws one uniform float per element (in the compute dtype, so in
    bfloat16 under `mixed_bfloat16`, which TF's CPU kernel makes slowly). On
    CPU those Philox draws are most of dropout's cost, and a BERT step drops
    out its embeddings, attention probabilities and both residual branches of
    every block. This layer draws 32 random bits per two elements and keeps an
    element where its 16 bits are at least `round(rate * 2**16)`, so the drop
    probability is `rate` to within 2**-17 (Keras's bfloat16 uniforms give it to
    within 2**-8). Kept elements are scaled by `1 / (1 - rate)` as in Keras.
    The seed generator, its checkpointed state and the configuration are
    Keras's; masks differ from Keras's for the same seed. `noise_shape` and a
    rate of 0 or 1 take Keras's own path.

    Args:
        **kwargs: the arguments of `keras.layers.Dropout`: `rate`,
            `noise_shape`, `seed`, `dtype`, `name`.

    Example:

    >>> layer = kbert.layers.Dropout(0.1)
    >>> layer(tf.ones((2, 8)), training=True)
    """

    def call(self, inputs, training=False):
        if not training or self.noise_shape is not None or not 0.0 < self.rate < 1.0:
            return super().call(inputs, training=training)
        keep = tf.cast(_keep_mask(tf.shape(inputs), self.rate, self.seed_generator.next()),
                       inputs.dtype)
        return inputs * keep * tf.cast(1.0 / (1.0 - self.rate), inputs.dtype)


def _keep_mask(shape: tf.Tensor, rate: float, seed: tf.Tensor) -> tf.Tensor:
    """Boolean Tensor of `shape`, True with probability `1 - rate` (to 2**-16)."""
    if seed.dtype != tf.int32:
        # As Keras does for TF's stateless ops, which take int32 seeds.
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
    size = tf.reduce_prod(shape)
    words = tf.random.stateless_uniform(
        [(size + 1) // 2], seed, minval=None, maxval=None, dtype=tf.uint32)
    halves = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:size]
    threshold = tf.constant(round(rate * 2**_BITS), tf.uint16)
    return tf.reshape(halves >= threshold, shape)

