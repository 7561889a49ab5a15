"""BERT's tanh GELU, with a fused gradient for training."""

from __future__ import annotations

import keras
import tensorflow as tf

_SQRT_2_OVER_PI = 0.7978845608028654
_COEFF = 0.044715


@keras.saving.register_keras_serializable(package="kbert")
def gelu_approximate(x):
    """The tanh approximation of GELU, as original BERT and keras-hub compute it.

    The forward pass is exactly `tf.nn.gelu(x, approximate=True)` (the same ops,
    so the same values as keras-hub's `gelu_approximate` in every dtype, and
    no XLA in inference or serving graphs). Only the gradient differs in how it
    is computed: autodiff of that expression is about ten element-wise ops, each
    a full pass over the `[batch, sequence, intermediate]` activations, and
    under `mixed_bfloat16` TF's CPU kernels are slower in bfloat16 than in
    float32. Here the derivative is one XLA-compiled function (one fused pass,
    computed in float32), which takes the feed-forward GELU from one of the
    larger costs of a small BERT's training step to a minor one.

    Args:
        x: float Tensor.

    Returns:
        Tensor of `x`'s shape and dtype.

    Example:

    >>> kbert.layers.gelu_approximate(tf.constant([-1.0, 0.0, 1.0]))
    """
    return _gelu(tf.convert_to_tensor(x))


@tf.custom_gradient
def _gelu(x):
    coeff = tf.cast(_COEFF, x.dtype)
    y = 0.5 * x * (1.0 + tf.tanh(_SQRT_2_OVER_PI * (x + coeff * tf.pow(x, 3))))
    return y, lambda dy: _gelu_gradient(x, dy)


# Compiled with XLA even on CPU (where the rest of the step is not): it fuses
# the derivative's element-wise ops into one pass. Only the backward pass runs
# it, so exported SavedModels execute no XLA.
@tf.function(jit_compile=True)
def _gelu_gradient(x, dy):
    """d gelu(x) / dx * dy, for y = 0.5 x (1 + tanh(u)), u = c (x + k x^3)."""
    x32 = tf.cast(x, tf.float32)
    x_squared = x32 * x32
    t = tf.tanh(x32 * (_SQRT_2_OVER_PI + _SQRT_2_OVER_PI * _COEFF * x_squared))
    du_dx = _SQRT_2_OVER_PI * (1.0 + 3.0 * _COEFF * x_squared)
    derivative = 0.5 * (1.0 + t) + 0.5 * x32 * (1.0 - t * t) * du_dx
    return tf.cast(tf.cast(dy, tf.float32) * derivative, x.dtype)
