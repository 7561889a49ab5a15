"""Keras's LayerNormalization with an XLA-fused gradient for training."""

from __future__ import annotations

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="kbert")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` with the same values and a fused gradient.

    The forward pass is Keras's own ops (`keras.ops.layer_normalization`, so the
    same values in every dtype and no XLA in inference or serving graphs).
    Autodiff of it is about fifteen small ops (moments, broadcasts, tiles and
    reductions), each a pass over the activations; a BERT step normalises
    twice per block. Here the gradient over the last axis is one XLA-compiled
    function computed in float32. Other configurations (`rms_scaling`, other
    axes, no `center` or `scale`) use Keras's path.

    Args:
        **kwargs: the arguments of `keras.layers.LayerNormalization`, such as
            `epsilon`, `dtype` and `name`.

    Example:

    >>> layer = kbert.layers.LayerNormalization(epsilon=1e-12)
    >>> layer(tf.ones((2, 8)))
    """

    def call(self, inputs):
        axis = self.axis if isinstance(self.axis, int) else tuple(self.axis)
        if (self.rms_scaling or not (self.center and self.scale)
                or axis not in (-1, len(inputs.shape) - 1, (-1,), (len(inputs.shape) - 1,))):
            return super().call(inputs)
        outputs = _layer_norm(inputs, tf.convert_to_tensor(self.gamma),
                              tf.convert_to_tensor(self.beta), self.epsilon)
        return keras.ops.cast(outputs, self.compute_dtype)


def _layer_norm(x, gamma, beta, epsilon):
    @tf.custom_gradient
    def forward(x, gamma, beta):
        y = keras.ops.layer_normalization(x, gamma, beta, axis=-1, epsilon=epsilon)

        def grad(dy):
            return _layer_norm_gradient(x, gamma, dy, epsilon)

        return y, grad

    return forward(x, gamma, beta)


# Compiled with XLA even on CPU (where the rest of the step is not): the
# layer-norm gradient becomes two fused reductions and one element-wise pass.
# Only the backward pass runs it, so exported SavedModels execute no XLA.
@tf.function(jit_compile=True)
def _layer_norm_gradient(x, gamma, dy, epsilon):
    x32 = tf.cast(x, tf.float32)
    dy32 = tf.cast(dy, tf.float32)
    mean = tf.reduce_mean(x32, axis=-1, keepdims=True)
    centered = x32 - mean
    inv = tf.math.rsqrt(tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True) + epsilon)
    normalized = centered * inv
    outer = tf.range(tf.rank(x) - 1)
    d_gamma = tf.reduce_sum(dy32 * normalized, axis=outer)
    d_beta = tf.reduce_sum(dy32, axis=outer)
    g = dy32 * tf.cast(gamma, tf.float32)
    dx = inv * (g - tf.reduce_mean(g, axis=-1, keepdims=True)
                - normalized * tf.reduce_mean(g * normalized, axis=-1, keepdims=True))
    return tf.cast(dx, x.dtype), tf.cast(d_gamma, gamma.dtype), tf.cast(d_beta, gamma.dtype)
