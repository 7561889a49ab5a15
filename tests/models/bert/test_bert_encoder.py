
import keras
import keras_hub
import numpy as np
import pytest

from tests.conftest import A, H, I, L, P, V, BATCH, SEQ, tiny_encoder_kwargs, tiny_inputs
from kbert.models import BertEncoder


def _numpy(outputs):
    return {k: keras.ops.convert_to_numpy(v) for k, v in outputs.items()}


def test_encoder_outputs_and_names(tiny_encoder):
    outputs = _numpy(tiny_encoder(tiny_inputs()))
    assert outputs["sequence_output"].shape == (BATCH, SEQ, H)
    assert outputs["pooled_output"].shape == (BATCH, H)
    assert sorted(tiny_encoder.input) == ["padding_mask", "segment_ids", "token_ids"]
    # The pooled output is tanh(dense(first token)).
    kernel, bias = (keras.ops.convert_to_numpy(w) for w in tiny_encoder.pooled_dense.weights)
    expected = np.tanh(outputs["sequence_output"][:, 0] @ kernel + bias)
    np.testing.assert_allclose(outputs["pooled_output"], expected, atol=1e-5)


def test_encoder_numerics_are_original_bert(tiny_encoder):
    assert tiny_encoder.embeddings_layer_norm.epsilon == 1e-12
    for layer in tiny_encoder.transformer_layers:
        assert layer.layer_norm_epsilon == 1e-12
        assert layer.normalize_first is False
        assert layer.activation.__name__ == "gelu_approximate"
    std = np.std(keras.ops.convert_to_numpy(tiny_encoder.token_embedding.embeddings))
    assert 0.012 < std < 0.02  # TruncatedNormal(0.02) has std ~0.0176
    assert np.abs(keras.ops.convert_to_numpy(tiny_encoder.token_embedding.embeddings)).max() <= 0.04


def test_padding_does_not_change_unpadded_positions(tiny_encoder):
    inputs = tiny_inputs()
    longer = {k: np.concatenate([v, np.zeros((BATCH, 3), "int32")], axis=1) for k, v in inputs.items()}
    short = _numpy(tiny_encoder(inputs))
    long = _numpy(tiny_encoder(longer))
    np.testing.assert_allclose(long["sequence_output"][:, :SEQ], short["sequence_output"], atol=1e-5)


def test_config_round_trip(tiny_encoder):
    config = tiny_encoder.get_config()
    assert BertEncoder.from_config(config).get_config() == config
    assert config["activation"] == "gelu_approximate"


def test_keras_save_and_load_give_identical_outputs(tiny_encoder, tmp_path):
    path = str(tmp_path / "encoder.keras")
    tiny_encoder.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored, BertEncoder)
    inputs = tiny_inputs(seed=1)
    for name, value in _numpy(tiny_encoder(inputs)).items():
        np.testing.assert_array_equal(_numpy(restored(inputs))[name], value)


def test_parity_with_keras_hub_bert_backbone(tiny_encoder):
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=V, num_layers=L, num_heads=A, hidden_dim=H,
        intermediate_dim=I, max_sequence_length=P,
    )
    assert backbone.count_params() == tiny_encoder.count_params()
    for layer in tiny_encoder.layers:
        if layer.weights:
            backbone.get_layer(layer.name).set_weights(layer.get_weights())
    inputs = tiny_inputs(seed=2)
    ours, theirs = _numpy(tiny_encoder(inputs)), _numpy(backbone(inputs))
    for name in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(ours[name], theirs[name], atol=1e-5)


def test_hidden_dim_not_divisible_by_heads_is_named():
    with pytest.raises(ValueError, match=r"hidden_dim=30.*num_heads=4"):
        BertEncoder(**tiny_encoder_kwargs(hidden_dim=30))


def _original_config(**changes):
    config = {
        "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "hidden_size": H, "initializer_range": 0.02, "intermediate_size": I,
        "max_position_embeddings": P, "num_attention_heads": A, "num_hidden_layers": L,
        "type_vocab_size": 2, "vocab_size": V,
    }
    config.update(changes)
    return {k: v for k, v in config.items() if v is not None}


def test_from_bert_config():
    encoder = BertEncoder.from_bert_config(_original_config())
    assert (encoder.num_layers, encoder.hidden_dim, encoder.num_heads) == (L, H, A)
    assert encoder.activation == "gelu_approximate"  # the original's "gelu" is the tanh form
    assert encoder.count_params() == BertEncoder(**tiny_encoder_kwargs()).count_params()


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"num_hidden_layers": None}, r"missing key\(s\) \['num_hidden_layers'\]"),
        ({"hidden_sizes": 3}, r"unknown key\(s\) \['hidden_sizes'\]"),
    ],
)
def test_bad_bert_config_is_named(changes, message):
    with pytest.raises(ValueError, match=message):
        BertEncoder.from_bert_config(_original_config(**changes))


# --- embedding_dim: ELECTRA's narrower embeddings with a projection ---

E = 16  # embedding width below H, as ELECTRA-Small's 128 below 256


def test_default_has_no_projection_and_an_unchanged_config(tiny_encoder):
    assert tiny_encoder.embeddings_projection is None
    assert "embedding_dim" not in tiny_encoder.get_config()
    assert tiny_encoder.embedding_width == H
    assert not [w for w in tiny_encoder.weights if "projection" in w.path]


@pytest.fixture(scope="module")
def narrow_encoder():
    return BertEncoder(**tiny_encoder_kwargs(embedding_dim=E))


def test_embedding_projection_sizes_and_parameter_count(narrow_encoder, tiny_encoder):
    embeddings = lambda width: (V + P + 2) * width + 2 * width  # noqa: E731 (tables + LayerNorm)
    projection = E * H + H
    expected = (tiny_encoder.count_params() - embeddings(H)) + embeddings(E) + projection
    assert narrow_encoder.count_params() == expected
    assert tuple(narrow_encoder.token_embedding.embeddings.shape) == (V, E)
    assert tuple(narrow_encoder.embeddings_projection.kernel.shape) == (E, H)
    outputs = _numpy(narrow_encoder(tiny_inputs()))
    assert outputs["sequence_output"].shape == (BATCH, SEQ, H)


def test_embedding_dim_config_round_trip_and_keras_file(narrow_encoder, tmp_path):
    config = narrow_encoder.get_config()
    assert config["embedding_dim"] == E
    assert BertEncoder.from_config(config).get_config() == config
    path = str(tmp_path / "narrow.keras")
    narrow_encoder.save(path)
    restored = keras.saving.load_model(path)
    inputs = tiny_inputs(seed=4)
    np.testing.assert_array_equal(_numpy(restored(inputs))["sequence_output"],
                                  _numpy(narrow_encoder(inputs))["sequence_output"])


def test_parity_with_keras_hub_electra_backbone(narrow_encoder):
    backbone = keras_hub.models.ElectraBackbone(
        vocab_size=V, num_layers=L, num_heads=A, hidden_dim=H, embedding_dim=E,
        intermediate_dim=I, max_sequence_length=P)
    assert backbone.count_params() == narrow_encoder.count_params()
    for layer in narrow_encoder.layers:
        if layer.weights:
            backbone.get_layer(layer.name).set_weights(layer.get_weights())
    inputs = tiny_inputs(seed=5)
    ours, theirs = _numpy(narrow_encoder(inputs)), _numpy(backbone(inputs))
    for name in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(ours[name], theirs[name], atol=1e-5)


def test_bert_config_carries_embedding_size(narrow_encoder, tiny_encoder):
    from kbert.models.bert.bert_config import arguments_to_bert_config
    from kbert.models.bert.bert_config import bert_config_to_arguments

    config = arguments_to_bert_config(narrow_encoder.get_config())
    assert config["embedding_size"] == E and config["hidden_size"] == H
    assert bert_config_to_arguments(config)["embedding_dim"] == E
    # BERT configs keep exactly google-research/bert's keys (+ layer_norm_eps).
    assert "embedding_size" not in arguments_to_bert_config(tiny_encoder.get_config())


def test_shared_embeddings_are_the_same_variables(narrow_encoder):
    other = BertEncoder(**tiny_encoder_kwargs(hidden_dim=8, num_heads=1, intermediate_dim=32,
                                              embedding_dim=E), shared_embeddings=narrow_encoder)
    for name in ("token_embedding", "position_embedding", "segment_embedding",
                 "embeddings_layer_norm"):
        assert getattr(other, name) is getattr(narrow_encoder, name)
    assert other.token_embedding.embeddings is narrow_encoder.token_embedding.embeddings
    assert tuple(other.embeddings_projection.kernel.shape) == (E, 8)
    assert "shared_embeddings" not in other.get_config()
    with pytest.raises(ValueError, match=r"shared_embeddings cannot be used: embedding_width=32 "
                                         r"but the shared encoder has 16"):
        BertEncoder(**tiny_encoder_kwargs(), shared_embeddings=narrow_encoder)
