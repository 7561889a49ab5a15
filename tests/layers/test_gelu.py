"""kbert's tanh GELU: keras-hub's values, a gradient matching float64 autodiff."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras_hub.src.utils.keras_utils import gelu_approximate as keras_hub_gelu

from kbert.layers import gelu_approximate


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_values_are_keras_hubs_exactly(dtype):
    x = tf.cast(tf.random.stateless_normal((4096,), seed=[1, 2]) * 4, dtype)
    np.testing.assert_array_equal(tf.cast(gelu_approximate(x), "float32"),
                                  tf.cast(keras_hub_gelu(x), "float32"))


def test_gradient_matches_float64_autodiff():
    x = tf.random.stateless_normal((4096,), seed=[3, 4]) * 4
    upstream = tf.random.stateless_normal((4096,), seed=[5, 6])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = gelu_approximate(x)
    ours = tape.gradient(y, x, output_gradients=upstream)
    x64 = tf.cast(x, "float64")
    with tf.GradientTape() as tape:
        tape.watch(x64)
        y64 = keras_hub_gelu(x64)
    reference = tape.gradient(y64, x64, output_gradients=tf.cast(upstream, "float64"))
    np.testing.assert_allclose(ours, reference, rtol=0, atol=2e-5)


def test_bfloat16_gradient_is_the_float32_one_rounded():
    x = tf.random.stateless_normal((4096,), seed=[7, 8]) * 4
    x16 = tf.cast(x, "bfloat16")
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x16])
        y16 = gelu_approximate(x16)
    ours = tf.cast(tape.gradient(y16, x16), "float32")
    with tf.GradientTape() as tape:
        x32 = tf.cast(x16, "float32")
        tape.watch(x32)
        y32 = gelu_approximate(x32)
    reference = tape.gradient(y32, x32)
    np.testing.assert_allclose(ours, reference, rtol=2**-8, atol=1e-6)


def test_serializes_by_name():
    name = keras.activations.serialize(gelu_approximate)
    assert keras.activations.deserialize(name) is gelu_approximate
