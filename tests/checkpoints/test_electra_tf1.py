"""google-research/electra TF1 checkpoints (the discriminator) -> kbert and back, checked in numpy."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.checkpoints.bert_reference import H, L, V, VOCAB
from tests.checkpoints.bert_reference import gelu_erf, inputs_with_padding, reference_bert
from tests.checkpoints.bert_reference import tf1_arrays, write_tf1_checkpoint
from tests.conftest import tiny_encoder_kwargs
from kbert import checkpoints
from kbert.checkpoints import weight_map
from kbert.models import BertEncoder

E = 16  # embeddings narrower than H, projected as ELECTRA-Small's


def electra_arrays(seed=0):
    """A discriminator under google-research/electra's names, from BERT's by renaming."""
    rng = np.random.default_rng(seed + 100)
    bert = tf1_arrays(seed=seed, heads=False)
    arrays = {name.replace("bert/", "electra/", 1): value for name, value in bert.items()
              if not name.startswith("bert/pooler/")}  # ELECTRA has no pooler
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        rows = arrays[f"electra/embeddings/{name}"].shape[0]
        arrays[f"electra/embeddings/{name}"] = (rng.standard_normal((rows, E)) * 0.2).astype("float32")
    arrays["electra/embeddings/LayerNorm/gamma"] = (1 + rng.standard_normal(E) * 0.1).astype("float32")
    arrays["electra/embeddings/LayerNorm/beta"] = (rng.standard_normal(E) * 0.1).astype("float32")
    arrays["electra/embeddings_project/kernel"] = (rng.standard_normal((E, H)) * 0.2).astype("float32")
    arrays["electra/embeddings_project/bias"] = (rng.standard_normal(H) * 0.1).astype("float32")
    return arrays


# What else a google-research/electra pre-training checkpoint holds besides the discriminator.
PRETRAINING_EXTRAS = {
    "generator/embeddings_project/kernel": np.zeros((E, 8), "float32"),
    "generator/encoder/layer_0/output/dense/bias": np.zeros(8, "float32"),
    "generator_predictions/output_bias": np.zeros(V, "float32"),
    "discriminator_predictions/dense_1/kernel": np.zeros((H, 1), "float32"),
    "electra/encoder/layer_0/output/dense/bias/adam_m": np.zeros(H, "float32"),
    "global_step": np.array(3, "int64"),
}


@pytest.fixture(scope="module")
def electra_source(tmp_path_factory):
    """A tiny original-layout ELECTRA checkpoint without bert_config.json, and its arrays."""
    arrays = electra_arrays()
    checkpoint = write_tf1_checkpoint(str(tmp_path_factory.mktemp("electra")),
                                      {**arrays, **PRETRAINING_EXTRAS}, config=False,
                                      name="electra_small")
    return checkpoint, arrays


@pytest.fixture(scope="module")
def converted(electra_source):
    return checkpoints.load_electra_tf1(os.path.dirname(electra_source[0]))


def _sequence_output(encoder, inputs):
    return keras.ops.convert_to_numpy(encoder(inputs)["sequence_output"])


def test_discriminator_matches_a_numpy_electra(converted, electra_source):
    _, arrays = electra_source
    encoder = converted.encoder
    # Sizes from the shapes: one head per 64 dimensions (so 1 here), exact GELU.
    assert (encoder.num_layers, encoder.hidden_dim, encoder.embedding_dim, encoder.num_heads,
            encoder.activation) == (L, H, E, 1, "gelu_exact")
    inputs, _ = inputs_with_padding()
    as_bert = {name.replace("electra/", "bert/", 1): value for name, value in arrays.items()}
    expected = reference_bert(as_bert, inputs, num_heads=1, gelu=gelu_erf)["sequence_output"]
    valid = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(_sequence_output(encoder, inputs)[valid], expected[valid],
                               atol=1e-5)
    # The generator, the heads and optimizer state are listed, not converted.
    assert converted.skipped == sorted(PRETRAINING_EXTRAS)
    assert converted.vocabulary == VOCAB and converted.pretrainer is None
    summary = converted.summary()
    assert f"E={E}" in summary and "no pooler" in summary and "one per 64 dimensions" in summary


def test_weight_table_for_electra_names():
    rows = weight_map.weight_names(L, prefix="electra", embeddings_projection=True)
    names = {row.tf1_name for row in rows}
    assert names == set(electra_arrays())
    encoder = BertEncoder(**tiny_encoder_kwargs(embedding_dim=E))
    # Every variable but the pooler (which ELECTRA lacks) has an ELECTRA name.
    assert sorted(row.path for row in rows) == sorted(
        v.path for v in encoder.weights if not v.path.startswith("pooled_dense/"))


def test_round_trip_electra_kbert_electra_is_exact(converted, electra_source, tmp_path):
    converted.save_pretrained(str(tmp_path / "kbert"))
    assert json.load(open(tmp_path / "kbert" / "bert_config.json"))["embedding_size"] == E
    reloaded = checkpoints.load_kbert(str(tmp_path / "kbert"))
    notes = checkpoints.save_electra_tf1(reloaded, str(tmp_path / "tf1"))
    assert notes == ["the pooler (pooled_dense) is not written: google-research/electra has none"]
    # Exactly the source's discriminator, under the original names.
    reader = tf.train.load_checkpoint(str(tmp_path / "tf1"))
    _, arrays = electra_source
    assert set(reader.get_variable_to_shape_map()) == set(arrays)
    for name, value in arrays.items():
        np.testing.assert_array_equal(reader.get_tensor(name), value)
    # And back: the bert_config.json written beside it gives the same sizes.
    again = checkpoints.load_electra_tf1(str(tmp_path / "tf1"))
    config = lambda encoder: {k: v for k, v in encoder.get_config().items() if k != "name"}  # noqa: E731
    assert config(again.encoder) == config(converted.encoder)
    inputs, _ = inputs_with_padding(seed=1)
    np.testing.assert_array_equal(_sequence_output(again.encoder, inputs),
                                  _sequence_output(converted.encoder, inputs))
    assert not any("shapes" in note for note in again.notes)


def test_written_checkpoint_restores_in_the_original_tf1_graph(converted, tmp_path):
    checkpoints.save_electra_tf1(converted, str(tmp_path / "tf1"))
    expected = weight_map.tf1_arrays(converted.encoder, prefix="electra")
    with tf.Graph().as_default():
        variables = {name: tf.compat.v1.get_variable(name, shape=value.shape)
                     for name, value in expected.items()}
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            saver.restore(session, tf.train.latest_checkpoint(str(tmp_path / "tf1")))
            restored = session.run(variables)
    for name, value in expected.items():
        np.testing.assert_array_equal(restored[name], value)


def test_kbert_encoder_out_as_electra_names_with_notes(tmp_path):
    encoder = BertEncoder(**tiny_encoder_kwargs(embedding_dim=E))  # tanh GELU, kbert's default
    notes = checkpoints.save_electra_tf1(checkpoints.ConvertedModel(encoder), str(tmp_path / "a"))
    assert any("'gelu_approximate': google-research/electra's gelu is the exact" in note
               for note in notes)
    again = checkpoints.load_electra_tf1(str(tmp_path / "a"))
    assert again.encoder.activation == "gelu_approximate"  # as bert_config.json beside it says
    inputs, _ = inputs_with_padding(seed=2)
    np.testing.assert_array_equal(_sequence_output(again.encoder, inputs),
                                  _sequence_output(encoder, inputs))


def test_bert_tf1_and_keras_hub_with_a_projection(tmp_path):
    encoder = BertEncoder(**tiny_encoder_kwargs(embedding_dim=E))
    converted = checkpoints.ConvertedModel(encoder, vocabulary=VOCAB)
    notes = checkpoints.save_bert_tf1(converted, str(tmp_path / "bert"))
    assert any("bert/embeddings_project/*" in note for note in notes)
    again = checkpoints.load_bert_tf1(str(tmp_path / "bert" / "bert_model.ckpt"))
    inputs, _ = inputs_with_padding(seed=3)
    np.testing.assert_array_equal(_sequence_output(again.encoder, inputs),
                                  _sequence_output(encoder, inputs))
    with pytest.raises(ValueError, match=r"BertBackbone has no embedding projection, and this "
                                         r"encoder projects embedding_dim=16 to hidden_dim=32"):
        checkpoints.to_keras_hub(encoder)


def test_not_an_electra_checkpoint_and_unknown_tensors(tmp_path):
    bert = write_tf1_checkpoint(str(tmp_path / "bert"), tf1_arrays(heads=False))
    with pytest.raises(ValueError, match=r"has no electra/\* variables, so it is not a "
                                         r"google-research/electra checkpoint"):
        checkpoints.load_electra_tf1(bert)
    odd = write_tf1_checkpoint(str(tmp_path / "odd"),
                               {**electra_arrays(), "classifier/output_weights": np.zeros((2, H))},
                               config=False, name="electra_small")
    with pytest.raises(ValueError, match=r"1 unknown tensor\(s\) that kbert would drop: "
                                         r"classifier/output_weights"):
        checkpoints.load_electra_tf1(odd)
    assert checkpoints.load_electra_tf1(odd, ignore_unknown=True).skipped == [
        "classifier/output_weights"]
