"""google-research/bert TF1 checkpoints -> kbert and back, checked against a numpy BERT."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.checkpoints.bert_reference import BERT_CONFIG, H, L, V, VOCAB
from tests.checkpoints.bert_reference import converted_tf1, tf1_source  # noqa: F401 (fixtures)
from tests.checkpoints.bert_reference import inputs_with_padding, reference_bert, tf1_arrays, write_tf1_checkpoint
from kbert import checkpoints
from kbert.checkpoints import weight_map
from kbert.checkpoints import load_encoder
from kbert.checkpoints import load_pretrainer


def _numpy(outputs):
    return {k: keras.ops.convert_to_numpy(v) for k, v in outputs.items()}


def test_tf1_checkpoint_matches_numpy_reference(converted_tf1, tf1_source):
    _, arrays = tf1_source
    inputs, mask_positions = inputs_with_padding()
    expected = reference_bert(arrays, inputs, layout="tf1", mask_positions=mask_positions)
    assert converted_tf1.encoder.activation == "gelu_approximate"
    encoded = _numpy(converted_tf1.encoder(inputs))
    valid = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(encoded["sequence_output"][valid],
                               expected["sequence_output"][valid], atol=1e-5)
    np.testing.assert_allclose(encoded["pooled_output"], expected["pooled_output"], atol=1e-5)
    heads = _numpy(converted_tf1.pretrainer({**inputs, "mask_positions": mask_positions}))
    assert heads["mlm"].shape == (3, 2, V)
    np.testing.assert_allclose(heads["mlm"], expected["mlm"], atol=1e-4)
    np.testing.assert_allclose(heads["nsp"], expected["nsp"], atol=1e-5)
    # Optimizer state is skipped and reported, not silently dropped.
    assert converted_tf1.skipped == ["bert/pooler/dense/kernel/adam_m", "global_step"]
    assert converted_tf1.vocabulary == VOCAB
    assert converted_tf1.do_lower_case is True  # the vocabulary has no upper-case tokens


def test_weight_table_covers_every_variable_once(converted_tf1):
    rows = weight_map.weight_names(L, masked_lm=True, next_sentence=True)
    assert sorted(r.path for r in rows) == sorted(v.path for v in converted_tf1.pretrainer.weights)
    assert len({r.tf1_name for r in rows}) == len(rows) == 16 * L + 7 + 7


def test_round_trip_kbert_tf1_kbert_is_exact(converted_tf1, tf1_source, tmp_path):
    converted_tf1.save_pretrained(str(tmp_path / "kbert"))
    assert sorted(os.listdir(tmp_path)) == ["kbert"]  # no temporary directory left behind
    assert sorted(os.listdir(tmp_path / "kbert")) == [
        "bert_config.json", "encoder.weights.h5", "pretrainer.weights.h5",
        "tokenizer_config.json", "vocab.txt"]
    reloaded = checkpoints.load_kbert(str(tmp_path / "kbert"))
    notes = checkpoints.save_bert_tf1(reloaded, str(tmp_path / "tf1"))
    assert notes == []
    again = checkpoints.load_bert_tf1(str(tmp_path / "tf1" / "bert_model.ckpt"))
    assert again.do_lower_case is True and again.vocabulary == VOCAB
    for original, restored in zip(converted_tf1.pretrainer.weights, again.pretrainer.weights):
        assert original.path == restored.path
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(original),
                                      keras.ops.convert_to_numpy(restored))
    # The written checkpoint holds exactly the source's arrays under the original names.
    reader = tf.train.load_checkpoint(str(tmp_path / "tf1" / "bert_model.ckpt"))
    _, arrays = tf1_source
    assert set(reader.get_variable_to_shape_map()) == set(arrays)
    for name, value in arrays.items():
        np.testing.assert_array_equal(reader.get_tensor(name), value)
    config = json.load(open(tmp_path / "tf1" / "bert_config.json"))
    assert {k: config[k] for k in BERT_CONFIG} == BERT_CONFIG


def test_written_checkpoint_restores_in_the_original_tf1_graph(converted_tf1, tmp_path):
    checkpoints.save_bert_tf1(converted_tf1, str(tmp_path / "tf1"))
    expected = weight_map.tf1_arrays(converted_tf1.pretrainer)
    # What google-research/bert's code does: variables by name, a Saver restores them.
    with tf.Graph().as_default():
        variables = {name: tf.compat.v1.get_variable(name, shape=value.shape)
                     for name, value in expected.items()}
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            saver.restore(session, tf.train.latest_checkpoint(str(tmp_path / "tf1")))
            restored = session.run(variables)
    for name, value in expected.items():
        np.testing.assert_array_equal(restored[name], value)


def test_pretrained_directory_loads_for_pretraining(converted_tf1, tmp_path):
    converted_tf1.save_pretrained(str(tmp_path / "out"))
    inputs, mask_positions = inputs_with_padding(seed=1)
    encoder = load_encoder(str(tmp_path / "out"))
    np.testing.assert_array_equal(_numpy(encoder(inputs))["pooled_output"],
                                  _numpy(converted_tf1.encoder(inputs))["pooled_output"])
    pretrainer = load_pretrainer(str(tmp_path / "out"))
    features = {**inputs, "mask_positions": mask_positions}
    np.testing.assert_array_equal(_numpy(pretrainer(features))["mlm"],
                                  _numpy(converted_tf1.pretrainer(features))["mlm"])


def test_encoder_only_checkpoint_and_explicit_lower_case(tmp_path):
    arrays = tf1_arrays(seed=2, heads=False)
    cased_vocab = VOCAB[:-1] + ["Paris"]
    checkpoint = write_tf1_checkpoint(str(tmp_path / "ckpt"), arrays, vocab=cased_vocab)
    converted = checkpoints.load_bert_tf1(checkpoint)
    assert converted.pretrainer is None and converted.skipped == []
    assert converted.do_lower_case is False  # "Paris" makes the vocabulary cased
    assert checkpoints.load_bert_tf1(checkpoint, do_lower_case=True).do_lower_case is True
    converted.save_pretrained(str(tmp_path / "out"))
    assert "pretrainer.weights.h5" not in os.listdir(tmp_path / "out")


# === Bad input ===


def _checkpoint(tmp_path, arrays, config=None, vocab=VOCAB):
    return write_tf1_checkpoint(str(tmp_path / "bad"), arrays, config=config, vocab=vocab)


def test_missing_tensors_are_all_listed(tmp_path):
    arrays = tf1_arrays(heads=False)
    del arrays["bert/encoder/layer_0/attention/self/key/bias"]
    del arrays["bert/pooler/dense/kernel"]
    with pytest.raises(ValueError) as error:
        checkpoints.load_bert_tf1(_checkpoint(tmp_path, arrays))
    message = str(error.value)
    assert "2 missing tensor(s)" in message
    assert "bert/encoder/layer_0/attention/self/key/bias" in message
    assert "bert/pooler/dense/kernel" in message


def test_shape_mismatch_names_variable_and_both_shapes(tmp_path):
    arrays = tf1_arrays(heads=False)
    arrays["bert/encoder/layer_1/intermediate/dense/bias"] = np.zeros(36, "float32")
    with pytest.raises(ValueError, match=r"bert/encoder/layer_1/intermediate/dense/bias: "
                                         r"source has \[36\], the model needs \[37\]"):
        checkpoints.load_bert_tf1(_checkpoint(tmp_path, arrays))


def test_config_that_does_not_match_the_checkpoint(tmp_path):
    config = {**BERT_CONFIG, "num_hidden_layers": 3, "hidden_size": 48,
              "num_attention_heads": 4}
    with pytest.raises(ValueError) as error:
        checkpoints.load_bert_tf1(_checkpoint(tmp_path, tf1_arrays(heads=False), config=config))
    message = str(error.value)
    assert "does not match the checkpoint" in message
    assert f"hidden_size=48 but bert/embeddings/word_embeddings has shape [{V}, {H}]" in message
    assert "num_hidden_layers=3 but the checkpoint has 2 layers" in message


def test_unknown_tensors_are_reported_not_dropped(tmp_path):
    arrays = {**tf1_arrays(heads=False), "output_weights": np.zeros((2, H), "float32"),
              "output_bias": np.zeros(2, "float32")}
    checkpoint = _checkpoint(tmp_path, arrays)
    with pytest.raises(ValueError, match=r"2 unknown tensor\(s\) that kbert would drop: "
                                         r"output_bias, output_weights"):
        checkpoints.load_bert_tf1(checkpoint)
    converted = checkpoints.load_bert_tf1(checkpoint, ignore_unknown=True)
    assert converted.skipped == ["output_bias", "output_weights"]
    assert "not converted: 2 tensor(s): output_bias, output_weights" in converted.summary()


def test_vocabulary_size_must_match_embedding_rows(tmp_path):
    with pytest.raises(ValueError, match=f"has {V - 1} tokens but the word embeddings of .* "
                                         f"have {V} rows"):
        checkpoints.load_bert_tf1(_checkpoint(tmp_path, tf1_arrays(heads=False), vocab=VOCAB[:-1]))


def test_not_a_bert_checkpoint(tmp_path):
    with pytest.raises(ValueError, match="has no bert/\\* variables"):
        checkpoints.load_bert_tf1(_checkpoint(tmp_path, {"dense/kernel": np.zeros((2, 2), "float32")}))
    with pytest.raises(FileNotFoundError, match="bert_model.ckpt.index is missing"):
        checkpoints.load_bert_tf1(str(tmp_path / "nothing" / "bert_model.ckpt"))


def test_output_dir_is_never_half_written(converted_tf1, tmp_path):
    output_dir = str(tmp_path / "out")
    broken = checkpoints.ConvertedModel(converted_tf1.encoder, vocabulary=VOCAB[:-1] + ["two words"])
    with pytest.raises(ValueError, match="contain whitespace"):
        broken.save_pretrained(output_dir)
    assert os.listdir(tmp_path) == []  # neither the output nor the temporary directory
    converted_tf1.save_pretrained(output_dir)
    with pytest.raises(ValueError, match="already exists; .* --overwrite"):
        converted_tf1.save_pretrained(output_dir)
    converted_tf1.save_pretrained(output_dir, overwrite=True)
    assert os.listdir(tmp_path) == ["out"]
