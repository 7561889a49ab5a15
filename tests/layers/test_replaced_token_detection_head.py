import keras
import numpy as np
import pytest

from kbert.layers import ReplacedTokenDetectionHead


def test_one_logit_per_token_from_two_dense_layers():
    head = ReplacedTokenDetectionHead(activation="relu", name="rtd")
    sequence = np.random.default_rng(0).normal(size=(3, 7, 8)).astype("float32")
    logits = keras.ops.convert_to_numpy(head(sequence))
    kernel, bias, out_kernel, out_bias = (keras.ops.convert_to_numpy(w) for w in head.weights)
    assert logits.shape == (3, 7)
    assert kernel.shape == (8, 8) and out_kernel.shape == (8, 1)
    expected = (np.maximum(sequence @ kernel + bias, 0) @ out_kernel + out_bias)[..., 0]
    np.testing.assert_allclose(logits, expected, atol=1e-5)
    assert head.count_params() == 8 * 8 + 8 + 8 + 1


def test_config_round_trip_float32_logits_and_bad_activation():
    head = ReplacedTokenDetectionHead(activation="gelu_exact", dtype="mixed_bfloat16")
    assert keras.ops.convert_to_numpy(head(np.ones((2, 3, 4), "float32"))).dtype == np.float32
    config = head.get_config()
    assert ReplacedTokenDetectionHead.from_config(config).get_config() == config
    with pytest.raises(ValueError, match="Unknown activation 'gelu_fast'"):
        ReplacedTokenDetectionHead(activation="gelu_fast")
