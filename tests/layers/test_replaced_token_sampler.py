"""ELECTRA's sampler: changes only masked positions, labels exactly the changed tokens, samples softmax."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kbert.layers import ReplacedTokenSampler

VOCAB, SEQ, SLOTS, BATCH = 12, 9, 3, 64


def _batch(seed=0):
    """Masked input, positions (distinct, some slots padded to position 0), originals."""
    rng = np.random.default_rng(seed)
    originals = rng.integers(5, VOCAB, (BATCH, SEQ)).astype("int32")
    originals[:, 0] = 2  # [CLS]
    positions = np.stack([np.sort(rng.choice(np.arange(1, SEQ), SLOTS, replace=False))
                          for _ in range(BATCH)]).astype("int32")
    weights = np.ones((BATCH, SLOTS), "float32")
    weights[::3, -1] = 0.0  # a padded slot, pointing at [CLS] as the data tools write it
    positions[::3, -1] = 0
    labels = np.take_along_axis(originals, positions, axis=1)
    token_ids = originals.copy()
    for b in range(BATCH):
        for s in range(SLOTS):
            if weights[b, s]:
                token_ids[b, positions[b, s]] = 4  # [MASK]
    # Logits that favour the original token a little, so samples are often
    # but not always the original.
    logits = rng.normal(size=(BATCH, SLOTS, VOCAB)).astype("float32")
    np.put_along_axis(logits, labels[..., None], 2.0, axis=-1)
    return originals, token_ids, positions, labels, weights, logits


def _sample(sampler, batch):
    originals, token_ids, positions, labels, weights, logits = batch
    replaced, rtd_labels = sampler(logits, token_ids, positions, labels, weights)
    return keras.ops.convert_to_numpy(replaced), keras.ops.convert_to_numpy(rtd_labels)


def test_only_masked_positions_change_and_labels_mark_exactly_the_changes():
    batch = originals, token_ids, positions, _, weights, _ = _batch()
    replaced, labels = _sample(ReplacedTokenSampler(seed=1), batch)
    masked = np.zeros((BATCH, SEQ), bool)
    for b in range(BATCH):
        masked[b, positions[b][weights[b] > 0]] = True
    # Outside the masked positions nothing changes ([CLS] too, where padded slots point).
    np.testing.assert_array_equal(replaced[~masked], token_ids[~masked])
    assert (replaced[:, 0] == 2).all()
    # The labels are 1 exactly where the discriminator's input differs from the original.
    np.testing.assert_array_equal(labels, (replaced != originals).astype("int32"))
    # Both cases occur: samples equal to the original (label 0) and different ones.
    assert 0 < labels[masked].sum() < masked.sum()


def test_samples_follow_the_softmax_and_the_seed():
    logits = np.log(np.array([[[0.5, 0.3, 0.15, 0.05]]], "float32"))
    logits = np.repeat(logits, 4000, axis=1)  # 4000 independent draws in one call
    token_ids = np.zeros((1, 4001), "int32")
    positions = np.arange(1, 4001, dtype="int32")[None]
    labels = np.zeros((1, 4000), "int32")
    weights = np.ones((1, 4000), "float32")
    sampler = ReplacedTokenSampler(seed=3)
    draws = []
    for _ in range(5):  # 20k samples
        replaced, _ = sampler(logits, token_ids, positions, labels, weights)
        draws.append(keras.ops.convert_to_numpy(replaced)[0, 1:])
    frequencies = np.bincount(np.concatenate(draws), minlength=4) / 20000
    np.testing.assert_allclose(frequencies, [0.5, 0.3, 0.15, 0.05], atol=0.012)
    # The same seed gives the same samples; a low temperature gives the argmax.
    again = ReplacedTokenSampler(seed=3)(logits, token_ids, positions, labels, weights)[0]
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(again)[0, 1:], draws[0])
    cold = ReplacedTokenSampler(temperature=1e-3, seed=3)(logits, token_ids, positions, labels,
                                                           weights)[0]
    assert (keras.ops.convert_to_numpy(cold)[0, 1:] == 0).all()


def test_no_gradient_flows_through_the_sample():
    batch = _batch()
    logits = tf.Variable(batch[-1])
    with tf.GradientTape() as tape:
        replaced, labels = ReplacedTokenSampler(seed=0)(logits, *batch[1:5])
        total = tf.reduce_sum(tf.cast(replaced, tf.float32)) + tf.reduce_sum(
            tf.cast(labels, tf.float32))
    assert tape.gradient(total, logits) is None


def test_config_round_trip_and_bad_temperature():
    sampler = ReplacedTokenSampler(temperature=0.5, seed=7, name="sampler")
    config = sampler.get_config()
    assert ReplacedTokenSampler.from_config(config).get_config() == config
    with pytest.raises(ValueError, match=r"temperature=0.0 must be positive"):
        ReplacedTokenSampler(temperature=0.0)
