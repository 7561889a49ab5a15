"""BertMaskedLMHead: keras-hub's MaskedLMHead weights and numbers, gradients included."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras_hub.layers import MaskedLMHead
from keras_hub.layers import ReversibleEmbedding

from kbert.layers import BertMaskedLMHead
from tests.conftest import BATCH
from tests.conftest import H
from tests.conftest import PREDICTIONS
from tests.conftest import SEQ
from tests.conftest import V


def _heads(**embedding_kwargs):
    embedding = ReversibleEmbedding(V, H, **embedding_kwargs)
    embedding.build((None,))
    kwargs = dict(token_embedding=embedding, intermediate_activation="gelu",
                  layer_norm_epsilon=1e-12, name="masked_lm_head")
    ours, theirs = BertMaskedLMHead(**kwargs), MaskedLMHead(**kwargs)
    ours.build((None, SEQ, H))
    theirs.build((None, SEQ, H))
    rng = np.random.default_rng(0)
    theirs.set_weights([rng.normal(size=w.shape).astype("float32") for w in theirs.get_weights()])
    ours.set_weights(theirs.get_weights())
    return embedding, ours, theirs


@pytest.mark.parametrize("embedding_kwargs", [{}, {"logit_soft_cap": 5.0}])
def test_outputs_and_gradients_equal_keras_hub(embedding_kwargs):
    embedding, ours, theirs = _heads(**embedding_kwargs)
    assert [w.path for w in ours.weights] == [w.path for w in theirs.weights]
    rng = np.random.default_rng(1)
    inputs = tf.constant(rng.normal(size=(BATCH, SEQ, H)), tf.float32)
    positions = tf.constant(np.sort(rng.integers(0, SEQ, (BATCH, PREDICTIONS))), tf.int32)
    upstream = tf.constant(rng.normal(size=(BATCH, PREDICTIONS, V)), tf.float32)
    results = []
    for head in (ours, theirs):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            logits = head(inputs, mask_positions=positions)
            loss = tf.reduce_sum(logits * upstream)
        variables = [embedding.embeddings] + head.trainable_variables
        grads = tape.gradient(loss, [inputs] + variables)
        results.append([logits] + [tf.convert_to_tensor(g) for g in grads])
    assert results[0][0].shape == (BATCH, PREDICTIONS, V)
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert np.abs(results[0][1]).max() > 0.1  # the input gradient is not trivially zero


def test_registered_and_mixed_precision_dtype():
    assert keras.saving.get_registered_object("kbert>BertMaskedLMHead") is BertMaskedLMHead
    embedding = ReversibleEmbedding(V, H, dtype="mixed_bfloat16")
    embedding.build((None,))
    head = BertMaskedLMHead(token_embedding=embedding, dtype="mixed_bfloat16")
    logits = head(keras.ops.ones((BATCH, SEQ, H)), mask_positions=keras.ops.zeros((BATCH, 2), "int32"))
    # bfloat16 matmul, float32 bias and logits (what the loss wants).
    assert logits.dtype == "float32" and tuple(logits.shape) == (BATCH, 2, V)


def test_mixed_precision_training_path_matches_inference_path():
    # training=True adds the bias through an XLA fusion under mixed precision;
    # values and gradients must be those of the plain ops.
    embedding = ReversibleEmbedding(V, H, dtype="mixed_bfloat16")
    embedding.build((None,))
    head = BertMaskedLMHead(token_embedding=embedding, dtype="mixed_bfloat16")
    head.build((None, SEQ, H))
    rng = np.random.default_rng(2)
    head._bias.assign(rng.normal(size=(V,)).astype("float32"))
    inputs = tf.constant(rng.normal(size=(BATCH, SEQ, H)), tf.float32)
    positions = tf.constant(np.sort(rng.integers(0, SEQ, (BATCH, PREDICTIONS))), tf.int32)
    upstream = tf.constant(rng.normal(size=(BATCH, PREDICTIONS, V)), tf.float32)
    results = []
    for training in (True, False):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            logits = head(inputs, mask_positions=positions, training=training)
            loss = tf.reduce_sum(logits * upstream)
        grads = tape.gradient(loss, [inputs, embedding.embeddings, head._bias])
        results.append([logits] + [tf.convert_to_tensor(g) for g in grads])
    assert results[0][0].dtype == "float32"
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
