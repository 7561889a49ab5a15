import keras
import numpy as np

from kbert.layers import NextSentenceHead
from kbert.layers import get_activation


def test_next_sentence_head_shape_and_numbers():
    head = NextSentenceHead(name="nsp")
    pooled = np.random.default_rng(0).normal(size=(3, 8)).astype("float32")
    logits = keras.ops.convert_to_numpy(head(pooled))
    kernel, bias = (keras.ops.convert_to_numpy(w) for w in head.weights)
    assert logits.shape == (3, 2)
    assert kernel.shape == (8, 2) and bias.shape == (2,)
    np.testing.assert_allclose(logits, pooled @ kernel + bias, atol=1e-6)
    assert head.count_params() == 8 * 2 + 2


def test_next_sentence_head_config_round_trip():
    head = NextSentenceHead(num_classes=3, name="nsp")
    config = head.get_config()
    assert NextSentenceHead.from_config(config).get_config() == config


def test_next_sentence_head_is_float32_under_mixed_precision():
    head = NextSentenceHead(dtype="mixed_bfloat16")
    assert keras.ops.convert_to_numpy(head(np.ones((2, 4), "float32"))).dtype == np.float32


def test_gelu_approximate_is_the_tanh_form():
    x = np.linspace(-4, 4, 17).astype("float32")
    expected = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    got = keras.ops.convert_to_numpy(get_activation("gelu_approximate")(x))
    np.testing.assert_allclose(got, expected, atol=1e-6)
    exact = keras.ops.convert_to_numpy(get_activation("gelu_exact")(x))
    assert np.abs(exact - expected).max() > 1e-5  # the two forms really differ


def test_unknown_activation_is_named():
    import pytest

    with pytest.raises(ValueError, match="'swishy'"):
        get_activation("swishy")
