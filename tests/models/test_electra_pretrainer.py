"""ElectraPretrainer: generator sizes, one shared embedding, the loss by hand, AUC, saving."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import BATCH, H, I, L, P, SEQ, V, tiny_encoder_kwargs, tiny_inputs
from kbert.models import BertEncoder
from kbert.models import ElectraPretrainer
from kbert.models.electra_pretrainer import AUC_BUCKETS
from kbert.models.electra_pretrainer import auc_from_histogram

E = 16  # the discriminator's embedding width, below H as in ELECTRA-Small


def _data(seed=0):
    features = tiny_inputs(seed)
    features["mask_positions"] = np.array([[1, 3], [2, 4], [1, 0]], "int32")
    labels = {"mlm": np.array([[5, 6], [7, 8], [9, 0]], "int32")}
    weights = {"mlm": np.array([[1, 1], [1, 1], [1, 0]], "float32")}
    return features, labels, weights


@pytest.fixture(scope="module")
def pretrainer():
    keras.utils.set_random_seed(0)
    return ElectraPretrainer(BertEncoder(**tiny_encoder_kwargs(embedding_dim=E)))


def test_generator_is_a_quarter_as_wide_and_shares_one_embedding_variable(pretrainer):
    generator, discriminator = pretrainer.generator, pretrainer.encoder
    assert (generator.hidden_dim, generator.num_heads, generator.intermediate_dim,
            generator.num_layers) == (H // 4, 1, H, L)
    assert generator.token_embedding.embeddings is discriminator.token_embedding.embeddings
    table = discriminator.token_embedding.embeddings
    assert sum(v is table for v in pretrainer.trainable_variables) == 1
    assert sum(v.path == table.path for v in pretrainer.weights) == 1
    # The generator's MLM head projects onto the same table (tied).
    assert pretrainer.masked_lm_head.token_embedding is discriminator.token_embedding
    assert tuple(generator.embeddings_projection.kernel.shape) == (E, H // 4)


def test_parameter_count(pretrainer):
    G = H // 4
    embeddings = (V + P + 2) * E + 2 * E  # shared by both

    def encoder_without_embeddings(hidden, intermediate, layers):
        layer = 4 * (hidden * hidden + hidden) + 2 * hidden * intermediate + intermediate \
            + hidden + 4 * hidden
        return (E * hidden + hidden) + layers * layer + (hidden * hidden + hidden)

    generator_head = (G * E + E) + 2 * E + V  # dense to E, LayerNorm, output bias
    discriminator_head = (H * H + H) + (H + 1)
    assert pretrainer.encoder.count_params() == embeddings + encoder_without_embeddings(H, I, L)
    assert pretrainer.count_params() == (embeddings + encoder_without_embeddings(H, I, L)
                                         + encoder_without_embeddings(G, 4 * G, L)
                                         + generator_head + discriminator_head)


def test_generator_wider_than_the_discriminator_is_an_error():
    with pytest.raises(ValueError, match=r"generator_hidden_size=2.0 makes the generator wider "
                                         r"\(hidden 64\) than the discriminator \(hidden 32\)"):
        ElectraPretrainer(BertEncoder(**tiny_encoder_kwargs()), generator_hidden_size=2.0)
    with pytest.raises(ValueError, match=r"give a generator of 0 layer\(s\)"):
        ElectraPretrainer(BertEncoder(**tiny_encoder_kwargs()), generator_layers=0.1)


def test_loss_is_generator_mlm_plus_50_times_the_discriminators_cross_entropy(pretrainer):
    features, labels, weights = _data()
    totals = pretrainer.loss_normalizers(features, labels, weights)
    assert float(totals["mlm_weight"]) == 5.0
    assert float(totals["tokens"]) == features["padding_mask"].sum()
    state = pretrainer.sampler.seed_generator.state.numpy()
    loss, statistics = pretrainer.pretraining_losses(features, labels, weights, totals,
                                                     training=False)
    # The same seed state again gives the same samples, to recompute by hand.
    pretrainer.sampler.seed_generator.state.assign(state)
    outputs = {k: keras.ops.convert_to_numpy(v) for k, v in pretrainer(
        {**features, "mask_labels": labels["mlm"], "mask_weights": weights["mlm"]}).items()}
    logits = outputs["mlm"].astype("float64")
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    mlm = -np.take_along_axis(log_probs, labels["mlm"][..., None], -1)[..., 0]
    mlm_loss = (mlm * weights["mlm"]).sum() / weights["mlm"].sum()
    z, y, mask = outputs["rtd"].astype("float64"), outputs["rtd_labels"], features["padding_mask"]
    bce = np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))
    rtd_loss = (bce * mask).sum() / mask.sum()
    np.testing.assert_allclose(float(loss), mlm_loss + 50.0 * rtd_loss, rtol=1e-5)
    np.testing.assert_allclose(float(statistics["rtd_loss"]), (bce * mask).sum(), rtol=1e-5)
    assert float(statistics["replaced"]) == (y * mask).sum()
    histogram = keras.ops.convert_to_numpy(statistics["rtd_histogram"])
    assert histogram.shape == (2, AUC_BUCKETS) and histogram.sum() == mask.sum()
    # Padding never counts: the discriminator's tokens are the padding mask's.
    assert outputs["rtd"].shape == (BATCH, SEQ)


def test_metrics_from_summed_statistics(pretrainer):
    sums = {"mlm_weight": 10.0, "tokens": 40.0, "mlm_loss": 30.0, "mlm_correct": 4.0,
            "rtd_loss": 8.0, "rtd_correct": 36.0, "replaced": 6.0,
            "rtd_histogram": np.stack([np.eye(AUC_BUCKETS)[150] * 6,
                                       np.eye(AUC_BUCKETS)[20] * 34])}
    assert pretrainer.pretraining_metrics(sums) == pytest.approx({
        "masked_lm_loss": 3.0, "masked_lm_accuracy": 0.4, "discriminator_loss": 0.2,
        "discriminator_accuracy": 0.9, "discriminator_auc": 1.0, "replaced_fraction": 0.15})


def test_streaming_auc_equals_keras_auc_on_the_predictions():
    rng = np.random.default_rng(0)
    labels = (rng.random(5000) < 0.15).astype("float32")
    probabilities = np.clip(rng.normal(0.3 + 0.3 * labels, 0.2), 0, 1).astype("float32")
    mask = (rng.random(5000) < 0.9).astype("float32")
    buckets = np.minimum((probabilities * AUC_BUCKETS).astype(int), AUC_BUCKETS - 1)
    histogram = np.stack([np.bincount(buckets, labels * mask, AUC_BUCKETS),
                          np.bincount(buckets, (1 - labels) * mask, AUC_BUCKETS)])
    metric = keras.metrics.AUC(num_thresholds=AUC_BUCKETS + 1)
    metric.update_state(labels, probabilities, sample_weight=mask)
    expected = float(metric.result())
    assert 0.7 < expected < 0.95
    assert auc_from_histogram(histogram) == pytest.approx(expected, abs=1e-6)


def test_config_round_trip_and_keras_file(pretrainer, tmp_path):
    config = pretrainer.get_config()
    assert ElectraPretrainer.from_config(config).get_config() == config
    path = str(tmp_path / "electra.keras")
    pretrainer.save(path)
    restored = keras.saving.load_model(path, compile=False)
    assert isinstance(restored, ElectraPretrainer)
    assert restored.generator.token_embedding.embeddings is (
        restored.encoder.token_embedding.embeddings)
    for ours, theirs in zip(restored.get_weights(), pretrainer.get_weights()):
        np.testing.assert_array_equal(ours, theirs)
    features, labels, weights = _data(seed=3)
    inputs = {**features, "mask_labels": labels["mlm"], "mask_weights": weights["mlm"]}
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(restored(inputs)["mlm"]),
                                  keras.ops.convert_to_numpy(pretrainer(inputs)["mlm"]))


def test_gradients_reach_generator_and_discriminator_but_not_through_the_sample(pretrainer):
    features, labels, weights = _data()
    totals = pretrainer.loss_normalizers(features, labels, weights)
    with tf.GradientTape(persistent=True) as tape:
        _, statistics = pretrainer.pretraining_losses(features, labels, weights, totals)
        mlm, rtd = statistics["mlm_loss"], statistics["rtd_loss"]
    generator_kernel = pretrainer.generator.transformer_layers[0].weights[0]
    discriminator_kernel = pretrainer.encoder.transformer_layers[0].weights[0]
    # The discriminator's loss never reaches the generator (sampling stops it) ...
    assert tape.gradient(rtd, generator_kernel) is None
    assert tape.gradient(mlm, discriminator_kernel) is None
    # ... and each loss trains its own network and the shared embeddings.
    assert tape.gradient(rtd, discriminator_kernel) is not None
    assert tape.gradient(mlm, generator_kernel) is not None
    table = pretrainer.encoder.token_embedding.embeddings
    assert tape.gradient(rtd, table) is not None and tape.gradient(mlm, table) is not None
