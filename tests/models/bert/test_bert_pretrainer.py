import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import BATCH, H, PREDICTIONS, V, tiny_encoder_kwargs, tiny_inputs
from kbert.models import BertEncoder
from kbert.models import BertPretrainer


def _features(seed=0):
    features = tiny_inputs(seed)
    features["mask_positions"] = np.array([[1, 3], [2, 4], [1, 5]], "int32")
    return features


@pytest.fixture(scope="module")
def pretrainer():
    return BertPretrainer(BertEncoder(**tiny_encoder_kwargs()))


def test_outputs(pretrainer):
    outputs = pretrainer(_features())
    assert tuple(outputs["mlm"].shape) == (BATCH, PREDICTIONS, V)
    assert tuple(outputs["nsp"].shape) == (BATCH, 2)


def test_masked_lm_head_matches_hand_computation(pretrainer):
    features = _features()
    mlm = keras.ops.convert_to_numpy(pretrainer(features)["mlm"])
    sequence = keras.ops.convert_to_numpy(pretrainer.encoder(
        {k: features[k] for k in ("token_ids", "segment_ids", "padding_mask")})["sequence_output"])
    head = pretrainer.masked_lm_head
    own = [head._intermediate_dense.kernel, head._intermediate_dense.bias,
           head._intermediate_layer_norm.gamma, head._intermediate_layer_norm.beta, head._bias]
    kernel, bias, gamma, beta, output_bias = (keras.ops.convert_to_numpy(w) for w in own)
    embeddings = keras.ops.convert_to_numpy(pretrainer.encoder.token_embedding.embeddings)
    gathered = np.take_along_axis(sequence, features["mask_positions"][..., None], axis=1)
    x = gathered @ kernel + bias
    x = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))  # tanh GELU
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    x = (x - mean) / np.sqrt(var + 1e-12) * gamma + beta  # epsilon 1e-12
    expected = x @ embeddings.T + output_bias  # tied to the token embedding
    assert output_bias.shape == (V,)
    np.testing.assert_allclose(mlm, expected, atol=1e-4)


def test_parameter_count(pretrainer):
    heads = (H * H + H) + 2 * H + V + (H * 2 + 2)
    assert pretrainer.count_params() == pretrainer.encoder.count_params() + heads


def test_fit_drives_the_loss_down():
    keras.utils.set_random_seed(0)
    model = BertPretrainer(BertEncoder(**tiny_encoder_kwargs(dropout=0.0)))
    features = _features()
    labels = {"mlm": np.array([[5, 6], [7, 8], [9, 0]], "int32"), "nsp": np.array([[0], [1], [0]], "int32")}
    weights = {"mlm": np.array([[1, 1], [1, 1], [1, 0]], "float32"), "nsp": np.ones(BATCH, "float32")}
    dataset = tf.data.Dataset.from_tensors((features, labels, weights)).repeat()
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    # Built before fit, so that fit traces its step once (not again without creating them).
    model.optimizer.build(model.trainable_variables)
    history = model.fit(dataset, steps_per_epoch=20, epochs=1, verbose=0)
    first = model.evaluate(features, labels, sample_weight=weights, verbose=0, return_dict=True)
    losses = history.history["loss"]
    assert first["loss"] < 0.5 * 6.0  # started near ln(99) + ln(2) = 5.3
    assert first["mlm_masked_lm_accuracy"] == 1.0
    assert np.isfinite(losses).all()


def test_mlm_loss_is_averaged_over_the_weights(pretrainer):
    features = _features()
    labels = {"mlm": np.array([[5, 6], [7, 8], [9, 0]], "int32"), "nsp": np.zeros((BATCH, 1), "int32")}
    weights = {"mlm": np.array([[1, 0], [1, 0], [1, 0]], "float32"), "nsp": np.ones(BATCH, "float32")}
    pretrainer.compile(optimizer="auto")
    result = pretrainer.evaluate(features, labels, sample_weight=weights, verbose=0, return_dict=True)
    logits = keras.ops.convert_to_numpy(pretrainer(features)["mlm"])[:, 0]
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -np.mean(log_probs[np.arange(BATCH), labels["mlm"][:, 0]])
    np.testing.assert_allclose(result["mlm_loss"], expected, rtol=1e-5)


def test_without_next_sentence():
    model = BertPretrainer(BertEncoder(**tiny_encoder_kwargs()), next_sentence=False)
    assert sorted(model(_features())) == ["mlm"]
    assert model.next_sentence_head is None


def test_config_round_trip_and_keras_file(pretrainer, tmp_path):
    config = pretrainer.get_config()
    assert BertPretrainer.from_config(config).get_config() == config
    path = str(tmp_path / "pretrainer.keras")
    pretrainer.save(path)
    restored = keras.saving.load_model(path, compile=False)
    features = _features(seed=3)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(restored(features)["mlm"]),
        keras.ops.convert_to_numpy(pretrainer(features)["mlm"]),
    )
