"""FusedAdamW: Keras AdamW's numbers, computed by TF's fused Adam kernel."""

import keras
import numpy as np
import tensorflow as tf

from kbert.training import FusedAdamW


def _run(optimizer_class, steps=5, dtype="float32", **kwargs):
    """Applies `steps` fixed random gradients (one sparse) and returns the variables."""
    rng = np.random.default_rng(0)
    variables = [
        keras.Variable(rng.normal(size=(7, 5)).astype(dtype), name="kernel"),
        keras.Variable(rng.normal(size=(5,)).astype(dtype), name="bias"),
        keras.Variable(rng.normal(size=(9, 5)).astype(dtype), name="embeddings"),
    ]
    optimizer = optimizer_class(**kwargs)
    optimizer.exclude_from_weight_decay(var_names=["bias"])
    optimizer.build(variables)

    @tf.function
    def step(grads):
        dense, bias, rows = grads
        sparse = tf.IndexedSlices(rows, tf.constant([1, 4, 1]), tf.constant([9, 5]))
        optimizer.apply_gradients(zip([dense, bias, sparse], variables))

    for _ in range(steps):
        step([rng.normal(size=(7, 5)).astype(dtype), rng.normal(size=(5,)).astype(dtype),
              rng.normal(size=(3, 5)).astype(dtype)])
    return [v.numpy() for v in variables] + [v.numpy() for v in optimizer.variables[2:]]


# Keras multiplies the second moment by 1 - beta_2 in double precision, TF's
# kernel by 1 - float32(0.999), 1.3e-5 smaller: each step then differs by
# ~6.4e-6 of the learning rate. So updates of 5 steps at rate 0.05 may differ
# by 5 x 0.05 x 6.4e-6 = 1.6e-6; anything else (decay, clipping, bias
# correction) would show up as orders of magnitude more.
_ATOL = 2e-6


def test_fused_adamw_matches_keras_adamw_with_decay_clipping_and_sparse_gradients():
    kwargs = dict(learning_rate=0.05, weight_decay=0.1, epsilon=1e-6, global_clipnorm=1.0)
    expected = _run(keras.optimizers.AdamW, **kwargs)
    actual = _run(FusedAdamW, **kwargs)
    initial = _run(FusedAdamW, steps=0, **kwargs)
    assert len(actual) == 3 + 2 * 3  # variables, then a momentum and a velocity each
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=0, atol=_ATOL)
    for a, i in zip(actual[:3], initial[:3]):  # every variable moved, by up to 5 steps x 0.05 + decay
        assert 0.1 < np.abs(a - i).max() < 0.35
    # Decay and clipping change the result by far more than the tolerance.
    for other in (dict(kwargs, weight_decay=0.0), dict(kwargs, global_clipnorm=None)):
        assert np.abs(_run(FusedAdamW, **other)[0] - actual[0]).max() > 100 * _ATOL


def test_fused_adamw_matches_without_decay_or_clipping_and_round_trips_config():
    expected = _run(keras.optimizers.AdamW, learning_rate=0.01, weight_decay=0.0)
    actual = _run(FusedAdamW, learning_rate=0.01, weight_decay=0.0)
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=0, atol=_ATOL / 2)  # rate 0.01, plus float32 rounding
    optimizer = FusedAdamW(learning_rate=0.01, weight_decay=0.01, global_clipnorm=1.0)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert isinstance(restored, FusedAdamW)
    assert restored.get_config() == optimizer.get_config()
