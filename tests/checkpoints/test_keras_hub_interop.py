"""kbert <-> keras-hub BertBackbone: exact, checked variable by variable."""

import os

import keras
import keras_hub
import numpy as np
import pytest

from tests.checkpoints.bert_reference import VOCAB, inputs_with_padding
from tests.checkpoints.bert_reference import converted_tf1, tf1_source  # noqa: F401 (fixtures)
from kbert import checkpoints
from kbert.models import BertEncoder


def _numpy(outputs):
    return {k: keras.ops.convert_to_numpy(v) for k, v in outputs.items()}


def test_to_keras_hub_gives_identical_outputs(converted_tf1):
    backbone = checkpoints.to_keras_hub(converted_tf1.encoder)
    assert type(backbone) is keras_hub.models.BertBackbone
    inputs, _ = inputs_with_padding(seed=9)
    expected = _numpy(converted_tf1.encoder(inputs))
    for name, value in _numpy(backbone(inputs)).items():
        np.testing.assert_array_equal(value, expected[name])
    encoder = checkpoints.from_keras_hub(backbone)
    assert type(encoder) is BertEncoder
    for name, value in _numpy(encoder(inputs)).items():
        np.testing.assert_array_equal(value, expected[name])


def test_keras_hub_preset_round_trip(converted_tf1, tmp_path):
    checkpoints.save_keras_hub_preset(converted_tf1, str(tmp_path / "preset"))
    backbone = keras_hub.models.BertBackbone.from_preset(str(tmp_path / "preset"))
    tokenizer = keras_hub.models.BertTokenizer.from_preset(str(tmp_path / "preset"))
    assert tokenizer.get_vocabulary() == VOCAB and tokenizer.lowercase is True
    inputs, _ = inputs_with_padding(seed=10)
    expected = _numpy(converted_tf1.encoder(inputs))
    np.testing.assert_array_equal(_numpy(backbone(inputs))["sequence_output"],
                                  expected["sequence_output"])
    back = checkpoints.load_keras_hub(str(tmp_path / "preset"))
    assert back.vocabulary == VOCAB and back.do_lower_case is True
    np.testing.assert_array_equal(_numpy(back.encoder(inputs))["pooled_output"],
                                  expected["pooled_output"])
    assert sorted(os.listdir(tmp_path)) == ["preset"]


def test_exact_gelu_encoder_is_refused_unless_allowed():
    encoder = BertEncoder(vocabulary_size=11, num_layers=1, num_heads=2, hidden_dim=8,
                          intermediate_dim=5, max_sequence_length=4, activation="gelu_exact")
    with pytest.raises(ValueError, match="activation='gelu_exact' .*--allow_numeric_mismatch"):
        checkpoints.to_keras_hub(encoder)
    backbone = checkpoints.to_keras_hub(encoder, allow_numeric_mismatch=True)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(backbone.get_layer("pooled_dense").kernel),
        keras.ops.convert_to_numpy(encoder.pooled_dense.kernel))
