"""StableAdamW against a NumPy reference written from the published algorithm.

Wortsman et al. 2023, Algorithm 1, as optimi (ModernBERT's optimizer) computes it: AdamW's
step with bias-corrected moments and epsilon added to sqrt(v_hat), the rate divided by
max(1, RMS) per tensor, RMS = sqrt(mean(g^2 / max(v_hat, eps^2))), the decay scaled with it.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kbert.training import StableAdamW
from kbert.training import create_optimizer

LR, BETA_1, BETA_2, EPS, DECAY = 1e-2, 0.9, 0.98, 1e-6, 0.1


def adamw_reference(theta, grads, stable, lr=LR, decay=DECAY):
    """Per step: (parameters after it, RMS of its update); `stable=False` is plain AdamW."""
    theta, m, v = theta.astype(np.float64), 0.0, 0.0
    steps = []
    for t, g in enumerate(grads, 1):
        g = g.astype(np.float64)
        m = BETA_1 * m + (1 - BETA_1) * g
        v = BETA_2 * v + (1 - BETA_2) * g * g
        m_hat, v_hat = m / (1 - BETA_1**t), v / (1 - BETA_2**t)
        rms = np.sqrt(np.mean(g * g / np.maximum(v_hat, EPS * EPS)))
        eta = lr / max(1.0, rms) if stable else lr
        theta = theta - eta * decay * theta - eta * m_hat / (np.sqrt(v_hat) + EPS)
        steps.append((theta, rms))
    return steps


def _gradients(seed=0):
    """Four shrinking gradients (RMS <= 1), a spike (RMS > 1), two small ones."""
    rng = np.random.default_rng(seed)
    grads = [rng.normal(size=(4, 5)) * 0.5**t for t in range(4)]
    grads += [rng.normal(size=(4, 5)) * 50.0] + [rng.normal(size=(4, 5)) * 0.1 for _ in range(2)]
    return [g.astype(np.float32) for g in grads]


def test_equals_adamw_while_the_rms_is_at_most_one_and_divides_the_step_by_it_above():
    theta0 = np.random.default_rng(1).normal(size=(4, 5)).astype(np.float32)
    grads = _gradients()
    stable = adamw_reference(theta0, grads, stable=True)
    rms = [r for _, r in stable]
    assert max(rms[:4]) <= 1.0 and rms[4] > 2.0 and max(rms[5:]) < 1.0, rms
    variable = keras.Variable(theta0)
    optimizer = StableAdamW(learning_rate=LR, beta_1=BETA_1, beta_2=BETA_2, epsilon=EPS,
                            weight_decay=DECAY)
    before = theta0.astype(np.float64)
    for t, (g, (expected, _)) in enumerate(zip(grads, stable), 1):
        optimizer.apply_gradients([(tf.constant(g), variable)])
        np.testing.assert_allclose(variable.numpy() - before, expected - before, rtol=2e-4,
                                   atol=1e-7, err_msg=f"step {t}")
        before = expected
    # Under RMS 1 it is AdamW; at the spike, AdamW's step (and decay) from the same point / RMS.
    adamw = adamw_reference(theta0, grads, stable=False)
    for t in range(4):
        np.testing.assert_allclose(stable[t][0], adamw[t][0], rtol=1e-12)
    spike_adamw = adamw_reference(theta0, grads[:5], stable=False)[4][0]
    np.testing.assert_allclose(stable[4][0] - stable[3][0], (spike_adamw - stable[3][0]) / rms[4],
                               rtol=1e-12)


def test_decay_is_decoupled_skips_excluded_variables_and_follows_the_rate_over_its_peak():
    """With zero gradients only the decay moves a weight: by weight_decay_rate x rate / peak
    per step (ModernBERT's fully decoupled 1e-5), never a LayerNorm scale or a bias."""
    optimizer = create_optimizer(LR, num_train_steps=10, optimizer="stable_adamw",
                                 weight_decay_rate=1e-3, global_clipnorm=None,
                                 decoupled_weight_decay=True)
    kernel = keras.Variable(np.ones((3, 2), np.float32), name="kernel")
    scale = keras.Variable(np.ones(2, np.float32), name="layer_norm_gamma")
    bias = keras.Variable(np.ones(2, np.float32), name="bias")
    for _ in range(2):
        optimizer.apply_gradients([(tf.zeros_like(v), v) for v in (kernel, scale, bias)])
    # BERT's schedule from a peak of 1e-2: rate / peak = 1.0, then 0.9.
    np.testing.assert_allclose(kernel.numpy(), (1 - 1e-3) * (1 - 0.9e-3), rtol=1e-6)
    assert (scale.numpy() == 1).all() and (bias.numpy() == 1).all()
    # Not decoupled, the decay is weight_decay_rate x rate.
    coupled = create_optimizer(LR, num_train_steps=10, optimizer="stable_adamw",
                               weight_decay_rate=1e-3, global_clipnorm=None)
    weights = keras.Variable(np.ones((3, 2), np.float32), name="kernel")
    coupled.apply_gradients([(tf.zeros_like(weights), weights)])
    np.testing.assert_allclose(weights.numpy(), 1 - 1e-3 * LR, rtol=1e-7)


def test_a_small_model_learns_and_the_optimizer_round_trips_through_keras():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype(np.float32)
    y = (x @ rng.normal(size=(8, 1))).astype(np.float32)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    optimizer = StableAdamW(learning_rate=1e-2, beta_2=0.98, weight_decay=1e-4)
    model.compile(optimizer=optimizer, loss="mse")
    losses = model.fit(x, y, batch_size=32, epochs=5, verbose=0).history["loss"]
    assert losses[-1] < 0.2 * losses[0], losses
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(restored) is StableAdamW
    assert restored.get_config() == optimizer.get_config()
    with pytest.raises(ValueError, match="no AMSGrad"):
        StableAdamW(amsgrad=True)
