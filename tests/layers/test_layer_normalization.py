"""kbert's LayerNormalization: Keras's values, weights and config; gradients to 1e-6."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kbert.layers import LayerNormalization
from tests.conftest import BATCH
from tests.conftest import H
from tests.conftest import SEQ


@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_values_and_gradients_equal_keras(dtype):
    ours = LayerNormalization(epsilon=1e-12, dtype=dtype, name="norm")
    theirs = keras.layers.LayerNormalization(epsilon=1e-12, dtype=dtype, name="norm")
    for layer in (ours, theirs):
        layer.build((None, SEQ, H))
    rng = np.random.default_rng(0)
    theirs.set_weights([rng.normal(size=w.shape).astype("float32") for w in theirs.weights])
    ours.set_weights(theirs.get_weights())
    assert [w.path for w in ours.weights] == [w.path for w in theirs.weights]
    inputs = tf.constant(rng.normal(size=(BATCH, SEQ, H)) * 3 + 1, tf.float32)
    upstream = tf.constant(rng.normal(size=(BATCH, SEQ, H)), tf.float32)
    results = []
    for layer in (ours, theirs):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            outputs = layer(inputs)
            loss = tf.reduce_sum(tf.cast(outputs, tf.float32) * upstream)
        grads = tape.gradient(loss, [inputs] + layer.trainable_variables)
        results.append([outputs] + grads)
    assert results[0][0].dtype == results[1][0].dtype
    np.testing.assert_array_equal(tf.cast(results[0][0], tf.float32),
                                  tf.cast(results[1][0], tf.float32))
    for a, b in zip(results[0][1:], results[1][1:]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_config_is_keras():
    layer = LayerNormalization(epsilon=1e-12, name="norm")
    config = layer.get_config()
    assert config == keras.layers.LayerNormalization(epsilon=1e-12, name="norm").get_config()
    assert LayerNormalization.from_config(config).get_config() == config
