"""The encoder's all-layers output and feature-based token classification (frozen encoder)."""

import keras
import numpy as np
import pytest

from tests.conftest import tiny_encoder_kwargs
from tests.conftest import tiny_inputs
from kbert.models import BertClassifier
from kbert.models import BertEncoder
from kbert.models import BertTokenClassifier


def test_all_layers_output_keeps_default_outputs_and_weights():
    keras.utils.set_random_seed(0)
    encoder = BertEncoder(**tiny_encoder_kwargs(num_layers=4))
    every = encoder.with_all_layers()
    inputs = tiny_inputs()
    plain, full = encoder(inputs, training=False), every(inputs, training=False)
    assert sorted(plain) == ["pooled_output", "sequence_output"]
    assert len(full["encoder_outputs"]) == 4
    for name in plain:
        np.testing.assert_array_equal(np.asarray(plain[name]), np.asarray(full[name]))
    np.testing.assert_array_equal(np.asarray(full["encoder_outputs"][-1]),
                                  np.asarray(full["sequence_output"]))
    assert [w.path for w in encoder.weights] == [w.path for w in every.weights]
    assert "output_all_layers" not in encoder.get_config()
    config = every.get_config()
    assert BertEncoder.from_config(config).get_config() == config
    assert every.with_all_layers() is every


def test_frozen_encoder_with_concat_last_4_trains_only_the_head(tmp_path):
    keras.utils.set_random_seed(1)
    encoder = BertEncoder(**tiny_encoder_kwargs(num_layers=4, dropout=0.5)).with_all_layers()
    model = BertTokenClassifier(encoder, 3, dropout=0.0, features="concat_last_4",
                                freeze_encoder=True)
    assert model.output_dense.kernel.shape == (4 * encoder.hidden_dim, 3)
    encoder_before = [w.numpy().copy() for w in encoder.weights]
    head_before = model.output_dense.kernel.numpy().copy()
    inputs = tiny_inputs()
    labels = np.random.default_rng(0).integers(0, 3, size=inputs["token_ids"].shape)
    # Eager: two steps take less time than tracing Keras' train function.
    model.compile(optimizer=keras.optimizers.Adam(1e-2), run_eagerly=True)
    model.fit(inputs, labels, sample_weight=inputs["padding_mask"], epochs=2, verbose=0)
    assert all(np.array_equal(a, w.numpy()) for a, w in zip(encoder_before, encoder.weights))
    assert not np.array_equal(head_before, model.output_dense.kernel.numpy())
    # Frozen means no dropout in the encoder either (its rate is 0.5 here).
    np.testing.assert_array_equal(np.asarray(model(inputs, training=True)),
                                  np.asarray(model(inputs, training=False)))
    config = model.get_config()
    assert BertTokenClassifier.from_config(config).get_config() == config
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras", compile=False)
    np.testing.assert_array_equal(np.asarray(loaded(inputs)), np.asarray(model(inputs)))
    assert loaded.freeze_encoder and not loaded.encoder.trainable


def test_features_need_the_all_layers_encoder():
    with pytest.raises(ValueError, match="features='sum_last_4'.*encoder.with_all_layers"):
        BertTokenClassifier(BertEncoder(**tiny_encoder_kwargs()), 3, features="sum_last_4")


def test_frozen_classifier_with_concat_last_4_reads_the_cls_vectors_and_trains_only_the_head(
        tmp_path):
    keras.utils.set_random_seed(2)
    encoder = BertEncoder(**tiny_encoder_kwargs(num_layers=4, dropout=0.5)).with_all_layers()
    model = BertClassifier(encoder, 2, dropout=0.0, features="concat_last_4", freeze_encoder=True)
    inputs = tiny_inputs()
    layers = [np.asarray(layer) for layer in encoder(inputs, training=False)["encoder_outputs"]]
    cls = np.concatenate([layers[3][:, 0], layers[2][:, 0], layers[1][:, 0], layers[0][:, 0]], -1)
    expected = cls @ model.output_dense.kernel.numpy() + model.output_dense.bias.numpy()
    np.testing.assert_allclose(np.asarray(model(inputs)), expected, atol=1e-5)

    encoder_before = [w.numpy().copy() for w in encoder.weights]
    head_before = model.output_dense.kernel.numpy().copy()
    # Eager: two steps take less time than tracing Keras' train function.
    model.compile(optimizer=keras.optimizers.Adam(1e-2), run_eagerly=True)
    model.fit(inputs, np.array([0, 1, 1]), epochs=2, verbose=0)
    assert all(np.array_equal(a, w.numpy()) for a, w in zip(encoder_before, encoder.weights))
    assert not np.array_equal(head_before, model.output_dense.kernel.numpy())
    np.testing.assert_array_equal(np.asarray(model(inputs, training=True)),
                                  np.asarray(model(inputs, training=False)))
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras", compile=False)
    np.testing.assert_array_equal(np.asarray(loaded(inputs)), np.asarray(model(inputs)))
    assert loaded.features == "concat_last_4" and loaded.freeze_encoder


def test_frozen_classifier_without_features_reads_the_pooled_output_and_weighted_mix_trains():
    keras.utils.set_random_seed(3)
    encoder = BertEncoder(**tiny_encoder_kwargs(num_layers=2))
    model = BertClassifier(encoder, 1, dropout=0.0, freeze_encoder=True)
    inputs = tiny_inputs()
    pooled = np.asarray(encoder(inputs, training=False)["pooled_output"])
    np.testing.assert_allclose(np.asarray(model(inputs)), pooled @ model.output_dense.kernel.numpy()
                               + model.output_dense.bias.numpy(), atol=1e-5)
    assert [w.path for w in model.trainable_weights] == [
        model.output_dense.kernel.path, model.output_dense.bias.path]

    mixed = BertClassifier(BertEncoder(**tiny_encoder_kwargs(num_layers=2)).with_all_layers(), 2,
                           features="weighted", freeze_encoder=True)
    assert sorted(w.name for w in mixed.trainable_weights) == [
        "bias", "gamma", "kernel", "layer_weights"]
