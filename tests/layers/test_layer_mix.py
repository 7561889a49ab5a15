"""EncoderLayerMix modes against numpy; layer_indexes range checks."""

import numpy as np
import pytest

from kbert.layers import EncoderLayerMix
from kbert.layers import layer_indexes


def test_layer_indexes():
    assert layer_indexes("-1,-2,-3,-4", 6) == [5, 4, 3, 2]
    assert layer_indexes([0, -1], 2) == [0, 1]
    with pytest.raises(ValueError, match=r"--layers=2: layer\(s\) \[2\] out of range"):
        layer_indexes("2", 2)


@pytest.mark.parametrize("mode", ["last", "sum_last_4", "concat_last_4", "weighted"])
def test_layer_mix_modes(mode):
    rng = np.random.default_rng(0)
    layers = [rng.normal(size=(2, 3, 4)).astype("float32") for _ in range(5)]
    mix = EncoderLayerMix(mode)
    got = np.asarray(mix(layers))
    expected = {"last": layers[-1], "sum_last_4": sum(layers[1:]),
                "concat_last_4": np.concatenate(layers[::-1][:4], axis=-1),
                "weighted": np.mean(layers, axis=0)}[mode]  # softmax(0) is an average
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    if mode == "weighted":
        mix.layer_weights.assign([0.0, 0.0, 0.0, 0.0, 50.0])
        mix.gamma.assign(2.0)
        np.testing.assert_allclose(np.asarray(mix(layers)), 2 * layers[-1], rtol=1e-5, atol=1e-5)
    config = mix.get_config()
    assert EncoderLayerMix.from_config(config).get_config() == config


def test_layer_mix_refuses_too_few_layers_and_unknown_modes():
    with pytest.raises(ValueError, match="'sum_last_4' needs 4 layers; the encoder has 2"):
        EncoderLayerMix("sum_last_4")([np.zeros((1, 2, 3), "float32")] * 2)
    with pytest.raises(ValueError, match="'mean' is unknown"):
        EncoderLayerMix("mean")
