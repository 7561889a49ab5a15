"""kbert's Dropout: Keras's layer with cheaper masks; use_fast_layers swaps it in."""

import keras
import numpy as np
import pytest

from kbert.layers import Dropout
from kbert.layers import use_fast_layers


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_drops_rate_of_elements_and_scales_the_rest(dtype):
    layer = Dropout(0.1, seed=7, dtype=dtype)
    outputs = keras.ops.convert_to_numpy(
        keras.ops.cast(layer(keras.ops.ones((300, 201), dtype=dtype), training=True), "float32"))
    dropped = np.mean(outputs == 0.0)
    assert abs(dropped - 0.1) < 0.005  # 60,300 elements: sd ~0.0012
    np.testing.assert_allclose(outputs[outputs != 0.0], 1 / 0.9, rtol=2**-8)


def test_identity_at_inference_and_new_masks_each_call():
    layer = Dropout(0.5, seed=1)
    x = keras.ops.ones((4, 64))
    np.testing.assert_array_equal(layer(x), x)
    first, second = layer(x, training=True), layer(x, training=True)
    assert not np.array_equal(first, second)


def test_same_seed_same_masks_and_keras_config():
    x = keras.ops.ones((3, 50))
    a, b = Dropout(0.3, seed=5), Dropout(0.3, seed=5)
    np.testing.assert_array_equal(a(x, training=True), b(x, training=True))
    config = a.get_config()
    assert config == keras.layers.Dropout(0.3, seed=5, name=a.name).get_config()
    assert Dropout.from_config(config).get_config() == config


def test_use_fast_layers_keeps_objects_and_seed_state():
    layer = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, dropout=0.1)
    x = keras.ops.ones((2, 5, 8))
    layer(x, x)
    dropouts = [l for l in layer._flatten_layers() if isinstance(l, keras.layers.Dropout)]
    before = [(id(l), l.seed_generator.state.path) for l in dropouts]
    use_fast_layers(layer)
    assert all(type(l) is Dropout for l in dropouts)
    assert [(id(l), l.seed_generator.state.path) for l in dropouts] == before
    state = keras.ops.convert_to_numpy(dropouts[0].seed_generator.state)
    layer(x, x, training=True)
    assert not np.array_equal(keras.ops.convert_to_numpy(dropouts[0].seed_generator.state), state)
