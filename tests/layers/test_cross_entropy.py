"""kbert's masked-LM cross-entropy equals TF's op in value and gradient."""

import numpy as np
import tensorflow as tf

from kbert.layers.cross_entropy import sparse_softmax_cross_entropy
from kbert.layers.cross_entropy import sparse_softmax_cross_entropy_and_hits


def test_matches_tf_op_in_value_and_gradient():
    rng = np.random.default_rng(0)
    logits = tf.constant(rng.normal(size=(3, 7, 99)) * 5, tf.float32)
    labels = tf.constant(rng.integers(0, 99, size=(3, 7)), tf.int32)
    weights = tf.constant(rng.random((3, 7)), tf.float32)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        ours = sparse_softmax_cross_entropy(labels, logits)
        theirs = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
        ours_total, theirs_total = tf.reduce_sum(ours * weights), tf.reduce_sum(theirs * weights)
    assert ours.shape == (3, 7)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(tape.gradient(ours_total, logits),
                               tape.gradient(theirs_total, logits), atol=1e-6)


def test_large_logits_stay_finite():
    loss = sparse_softmax_cross_entropy(tf.constant([0]), tf.constant([[1000.0, 0.0, -1000.0]]))
    np.testing.assert_allclose(loss, [0.0], atol=1e-6)


def test_hits_are_argmax_accuracy_and_the_loss_is_unchanged():
    rng = np.random.default_rng(1)
    logits = tf.constant(rng.normal(size=(4, 5, 50)), tf.float32)
    labels = rng.integers(0, 50, size=(4, 5))
    labels[:, 0] = np.argmax(logits[:, 0], axis=-1)  # some hits for sure
    loss, hits = sparse_softmax_cross_entropy_and_hits(tf.constant(labels, tf.int32), logits)
    np.testing.assert_array_equal(hits, (np.argmax(logits, axis=-1) == labels).astype("float32"))
    assert 4 <= float(tf.reduce_sum(hits)) < 20
    np.testing.assert_allclose(loss, sparse_softmax_cross_entropy(tf.constant(labels, tf.int32), logits),
                               rtol=0, atol=0)
