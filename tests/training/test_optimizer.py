"""create_optimizer and WarmupLinearDecay: BERT's schedule and weight-decay exclusions."""

import keras
import numpy as np
import pytest

from kbert.training import WarmupLinearDecay
from kbert.training import create_optimizer


def test_schedule_warms_up_then_decays_linearly_from_step_zero():
    schedule = WarmupLinearDecay(1e-4, decay_steps=1000, warmup_steps=100)
    values = [float(schedule(step)) for step in (0, 50, 99, 100, 500, 1000, 1200)]
    # As google-research/bert: decay is measured from step 0, so step 100 gives 0.9 * peak.
    np.testing.assert_allclose(values, [0.0, 5e-5, 9.9e-5, 9e-5, 5e-5, 0.0, 0.0], atol=1e-12)
    assert WarmupLinearDecay.from_config(schedule.get_config()).get_config() == schedule.get_config()


def test_adamw_settings_and_decay_exclusions(tiny_encoder):
    optimizer = create_optimizer(1e-4, num_train_steps=1000, num_warmup_steps=10)
    assert isinstance(optimizer, keras.optimizers.AdamW)
    assert (optimizer.weight_decay, optimizer.epsilon, optimizer.global_clipnorm) == (0.01, 1e-6, 1.0)
    decayed = {v.path for v in tiny_encoder.trainable_variables
               if optimizer._use_weight_decay(v.value)}
    assert "token_embedding/embeddings" in decayed
    assert "transformer_layer_0/feedforward_intermediate_dense/kernel" in decayed
    assert not [p for p in decayed if "layer_norm" in p or p.endswith("bias")]
    assert len(decayed) == 2 + 1 + 6 * 2 + 1  # embeddings (token, position, segment), kernels


def test_lamb_and_loss_scaling():
    assert isinstance(create_optimizer(1e-3, 100, optimizer="lamb"), keras.optimizers.Lamb)
    scaled = create_optimizer(1e-3, 100, dtype_policy="mixed_float16")
    assert isinstance(scaled, keras.optimizers.LossScaleOptimizer)
    assert isinstance(scaled.inner_optimizer, keras.optimizers.AdamW)


def test_bad_optimizer_settings_are_named():
    with pytest.raises(ValueError, match="Unknown optimizer 'sgd'; choose one of adamw, lamb"):
        create_optimizer(1e-3, 100, optimizer="sgd")
    with pytest.raises(ValueError, match="num_warmup_steps=200 exceeds num_train_steps=100"):
        create_optimizer(1e-3, 100, num_warmup_steps=200)
