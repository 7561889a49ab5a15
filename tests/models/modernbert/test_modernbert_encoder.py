"""ModernBertEncoder and its MLM head against a float64 numpy forward pass of Hugging Face's definition."""

import keras
import numpy as np
import pytest
from unittest import mock

from kbert import configurables
from kbert.checkpoints import load_encoder
from kbert.checkpoints import save_pretrained
from kbert.models import ENCODERS
from kbert.models import ModernBertEncoder
from kbert.models import ModernBertPretrainer
from kbert.models import encoder_architecture
from kbert.models.summary import parameter_table
from tests.models.modernbert import numpy_reference as ref
from tests.models.modernbert.random_weights import randomize

# Tiny sizes: 4 blocks (global, local, local, global), head size 8, window 4 (radius 2)
# on sequences of 11; global layers in chunks of 4, so both scalable paths run.
TINY = dict(vocabulary_size=99, num_layers=4, num_heads=4, hidden_dim=32, intermediate_dim=37,
            max_sequence_length=64, local_attention_window=4, attention_chunk_size=4)
LENGTH = 11


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(1, 99, size=(3, LENGTH)).astype("int32")
    padding_mask = np.ones((3, LENGTH), "int32")
    padding_mask[1, 8:] = 0
    padding_mask[2, 5:] = 0
    token_ids[padding_mask == 0] = 0
    return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
            "padding_mask": padding_mask}


def _pretrainer(seed=0, **overrides):
    keras.utils.set_random_seed(seed)
    pretrainer = ModernBertPretrainer(ModernBertEncoder(**{**TINY, **overrides}),
                                      dense_bias=overrides.get("mlp_bias", False))
    randomize(pretrainer, seed)
    return pretrainer


def _config(encoder):
    return encoder.get_config()


BIASES = [dict(), dict(norm_bias=True, attention_bias=True, mlp_bias=True),
          dict(attention_bias=True, classifier_pooling="mean")]


@pytest.mark.parametrize("overrides", BIASES)
def test_padded_batch_equals_hugging_face_definition(overrides):
    pretrainer = _pretrainer(**overrides)
    encoder = pretrainer.encoder
    inputs = _inputs()
    mask_positions = np.array([[0, 3, 10], [1, 4, 7], [0, 2, 4]], "int32")
    outputs = encoder(inputs)
    logits = pretrainer({**inputs, "mask_positions": mask_positions})["mlm"].numpy()

    weights = ref.hf_weights(encoder, pretrainer)
    expected = ref.encoder_forward(weights, _config(encoder), inputs["token_ids"],
                                   inputs["padding_mask"])
    real = inputs["padding_mask"] == 1
    np.testing.assert_allclose(outputs["sequence_output"].numpy()[real], expected[real],
                               atol=1e-5)
    np.testing.assert_allclose(outputs["pooled_output"].numpy(),
                               ref.pooled(_config(encoder), expected, inputs["padding_mask"]),
                               atol=1e-5)
    expected_logits = ref.mlm_logits(weights, _config(encoder),
                                     np.take_along_axis(expected, mask_positions[..., None], 1))
    # The logits reach |2| and more, where float32 keeps about 7 significant digits, so
    # their bound is relative as well: on an AMD EPYC (Zen 4) the float32 logit 1.5471115
    # is 1.05e-5 (6.7e-6 relative) from the float64 reference's 1.5471012, past a purely
    # absolute 1e-5; a wrong definition is off by orders of magnitude more.
    np.testing.assert_allclose(logits, expected_logits, rtol=1e-5, atol=1e-5)
    # The window matters: HF's model without it gives other outputs.
    everywhere = ref.encoder_forward(weights, {**_config(encoder), "local_attention_window": 64},
                                     inputs["token_ids"], inputs["padding_mask"])
    assert np.abs(everywhere[real] - expected[real]).max() > 1e-2


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_packed_instances_equal_each_alone(pooling):
    pretrainer = _pretrainer(seed=1, classifier_pooling=pooling)
    encoder = pretrainer.encoder
    lengths = [9, 3, 6]
    rng = np.random.default_rng(4)
    instances = [rng.integers(1, 99, size=n).astype("int32") for n in lengths]
    row = {key: np.zeros((1, 20), "int32") for key in
           ("token_ids", "segment_ids", "padding_mask", "instance_ids", "position_ids")}
    starts = np.cumsum([0] + lengths[:-1])
    for number, (start, ids) in enumerate(zip(starts, instances), start=1):
        span = slice(start, start + len(ids))
        row["token_ids"][0, span], row["padding_mask"][0, span] = ids, 1
        row["instance_ids"][0, span], row["position_ids"][0, span] = number, np.arange(len(ids))
    row["cls_positions"] = starts[None].astype("int32")
    row["mask_positions"] = np.array([[1, 9, 14]], "int32")
    outputs = encoder({k: v for k, v in row.items() if k != "mask_positions"})
    logits = pretrainer(row)["mlm"].numpy()

    weights = ref.hf_weights(encoder, pretrainer)
    for number, (start, ids) in enumerate(zip(starts, instances)):
        alone = ref.encoder_forward(weights, _config(encoder), ids[None], np.ones((1, len(ids))))
        np.testing.assert_allclose(outputs["sequence_output"][0, start:start + len(ids)],
                                   alone[0], atol=1e-5)
        np.testing.assert_allclose(outputs["pooled_output"][0, number],
                                   ref.pooled(_config(encoder), alone, np.ones((1, len(ids))))[0],
                                   atol=1e-5)
        np.testing.assert_allclose(logits[0, number],
                                   ref.mlm_logits(weights, _config(encoder),
                                                  alone[0, row["mask_positions"][0, number]
                                                        - start]), atol=1e-5)


def test_parameters_are_hugging_faces():
    """Closed form: no position embeddings, no attn_norm in layer 0, no pooler; head, tied decoder."""
    V, L, H, I = 99, 4, 32, 37
    pretrainer = _pretrainer()
    layer = 3 * H * H + H * H + H * 2 * I + I * H + 2 * H
    assert pretrainer.encoder.count_params() == V * H + H + L * layer - H + H
    assert pretrainer.count_params() == pretrainer.encoder.count_params() + H * H + H + V
    biased = _pretrainer(norm_bias=True, attention_bias=True, mlp_bias=True)
    # LayerNorm biases (embeddings, final, mlp_norm, attn_norm but layer 0's), Linear biases.
    extra = H + H + L * H + (L - 1) * H + L * (3 * H + H + 2 * I + H)
    assert biased.encoder.count_params() == pretrainer.encoder.count_params() + extra
    table = dict(parameter_table(pretrainer))
    assert table["transformer_layer_0"] == layer - H and "pooler" not in table
    assert sum(table.values()) == pretrainer.count_params()


@pytest.mark.parametrize("gin_file,encoder,pretrainer,layers", [
    ("modernbert_base.gin", 149_014_272, 149_655_232, 22),
    ("modernbert_large.gin", 394_781_696, 395_881_664, 28)])
def test_released_sizes_have_hugging_faces_counts(gin_file, encoder, pretrainer, layers):
    """The gin files build HF's counts (the real Keras model; zeros instead of random draws, for speed)."""
    configurables.parse_gin([gin_file])
    zeros = lambda self, shape, dtype=None: keras.ops.zeros(shape, dtype=dtype)  # noqa: E731
    with mock.patch.object(keras.initializers.TruncatedNormal, "__call__", zeros):
        model = configurables.pretrainer()
    assert type(model) is ModernBertPretrainer and model.encoder.num_layers == layers
    assert (model.encoder.count_params(), model.count_params()) == (encoder, pretrainer)
    windows = [block.local_attention_window for block in model.encoder.transformer_layers[:4]]
    assert windows == [None, 128, 128, None]


def test_registered_saved_and_reloaded(tmp_path):
    pretrainer = _pretrainer(classifier_pooling="mean")
    encoder = pretrainer.encoder
    assert ENCODERS["modernbert"] is ModernBertEncoder
    assert encoder_architecture(encoder) == "modernbert"
    config = encoder.get_config()
    assert ModernBertEncoder.from_config(config).get_config() == config
    inputs = _inputs()
    path = str(tmp_path / "pretrainer.keras")
    pretrainer.save(path)
    loaded = keras.saving.load_model(path)
    positions = np.array([[0, 1]] * 3, "int32")
    np.testing.assert_array_equal(loaded({**inputs, "mask_positions": positions})["mlm"],
                                  pretrainer({**inputs, "mask_positions": positions})["mlm"])
    assert type(loaded) is ModernBertPretrainer and loaded.activation == "gelu_exact"


def test_token_ids_and_padding_mask_alone(tmp_path):
    """HF's ModernBERT has no token types: `segment_ids` may be left out, and is ignored when given."""
    save_pretrained(str(tmp_path), _pretrainer().encoder)
    encoder = load_encoder(str(tmp_path))
    inputs = _inputs()
    two = {key: inputs[key] for key in ("token_ids", "padding_mask")}
    alone = encoder(two)["sequence_output"].numpy()
    with_segments = encoder({**two, "segment_ids": np.ones_like(inputs["token_ids"])})
    np.testing.assert_array_equal(with_segments["sequence_output"].numpy(), alone)
    # Tensors, and a functional graph over the two inputs, take them too.
    tensors = encoder({key: keras.ops.convert_to_tensor(value) for key, value in two.items()})
    np.testing.assert_array_equal(tensors["sequence_output"].numpy(), alone)
    symbolic = {key: keras.Input((None,), dtype="int32", name=key) for key in two}
    model = keras.Model(symbolic, encoder(symbolic)["pooled_output"])
    np.testing.assert_array_equal(model(two).numpy(), encoder(inputs)["pooled_output"].numpy())


def test_all_layers_and_attention_scores():
    encoder = _pretrainer().encoder
    inputs = _inputs()
    outputs = encoder.with_all_layers()(inputs)
    assert len(outputs["encoder_outputs"]) == 4
    scored = ModernBertEncoder(**TINY, output_attention_scores=True)
    scored.set_weights(encoder.get_weights())
    scored_outputs = scored(inputs)
    real = inputs["padding_mask"] == 1  # outputs at padding are undefined (HF's too)
    np.testing.assert_allclose(scored_outputs["sequence_output"].numpy()[real],
                               outputs["sequence_output"].numpy()[real], atol=1e-5)
    probabilities = scored_outputs["attention_scores"][1].numpy()  # a local layer
    assert probabilities.shape == (3, 4, LENGTH, LENGTH)
    distance = np.abs(np.arange(LENGTH)[:, None] - np.arange(LENGTH)[None, :])
    assert probabilities[0][:, distance > 2].max() == 0.0


def test_bad_settings_are_one_line_naming_them():
    with pytest.raises(ValueError, match=r"inputs of 65 tokens exceed max_sequence_length=64"):
        ModernBertEncoder(**TINY)({**_inputs(), "token_ids": np.ones((1, 65), "int32"),
                                   "segment_ids": np.ones((1, 65), "int32"),
                                   "padding_mask": np.ones((1, 65), "int32")})
    with pytest.raises(ValueError, match=r"classifier_pooling='max' is not one of"):
        ModernBertEncoder(**TINY, classifier_pooling="max")
    with pytest.raises(ValueError, match=r"hidden_dim=36 / num_heads=4 must be a whole, even"):
        ModernBertEncoder(**{**TINY, "hidden_dim": 36})


def test_weight_decay_spares_every_norm_and_bias():
    """`create_optimizer` exempts variables by name: every ModernBERT norm carries `layer_norm`."""
    from kbert.training import create_optimizer

    pretrainer = _pretrainer(norm_bias=True, attention_bias=True, mlp_bias=True)
    optimizer = create_optimizer(1e-4, num_train_steps=10)
    decayed = {v.path for v in pretrainer.trainable_variables
               if optimizer._use_weight_decay(v.value)}
    assert not [path for path in decayed if path.endswith(("gamma", "beta", "bias"))]
    kernels = [v.path for v in pretrainer.trainable_variables if v.path.endswith("kernel")]
    assert decayed == {"token_embedding/embeddings", *kernels} and len(kernels) == 4 * 4 + 1
