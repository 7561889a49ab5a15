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


def test_warmup_stable_decay_holds_the_peak_then_decays_at_the_end():
    from kbert.training import StableDecay
    from kbert.training import WarmupStableDecay

    steps = (0, 50, 100, 500, 800, 850, 900, 975, 1000, 1200)
    linear = WarmupStableDecay(1e-3, total_steps=1000, warmup_steps=100, decay_fraction=0.2)
    np.testing.assert_allclose([float(linear(step)) for step in steps],
                               [0, 5e-4, 1e-3, 1e-3, 1e-3, 7.5e-4, 5e-4, 1.25e-4, 0, 0],
                               atol=1e-9)
    root = WarmupStableDecay(1e-3, total_steps=1000, warmup_steps=100, decay_fraction=0.2,
                             decay_shape="1-sqrt")
    np.testing.assert_allclose([float(root(step)) for step in (800, 850, 900, 1000)],
                               [1e-3, 1e-3 * (1 - 0.5), 1e-3 * (1 - np.sqrt(0.5)), 0],
                               atol=1e-9)
    assert WarmupStableDecay.from_config(root.get_config()).get_config() == root.get_config()
    # Any pre-trainer's optimizer can take it (BERT's included): create_optimizer's switch.
    optimizer = create_optimizer(1e-3, 1000, 100, stable_decay=StableDecay(0.2, "1-sqrt"))
    schedule = optimizer._learning_rate
    assert isinstance(schedule, WarmupStableDecay) and schedule.get_config() == root.get_config()
    assert isinstance(create_optimizer(1e-3, 1000, 100)._learning_rate, WarmupLinearDecay)
    # BERT's gin files take it too.
    from kbert import configurables

    configurables.parse_gin(["tiny.gin"], ["run_pretraining.stable_decay = @StableDecay()",
                                           'StableDecay.decay_shape = "1-sqrt"'])
    assert configurables.StableDecay() == StableDecay(0.1, "1-sqrt")


def test_warmup_stable_decay_settings_are_named():
    from kbert.training import WarmupStableDecay

    with pytest.raises(ValueError, match=r"num_warmup_steps=900 and the 200 decay steps "
                                         r"\(StableDecay.decay_fraction=0.2\) do not fit in "
                                         r"num_train_steps=1000"):
        WarmupStableDecay(1e-3, 1000, 900, decay_fraction=0.2)
    with pytest.raises(ValueError, match=r"StableDecay.decay_shape='cosine' is not one of"):
        WarmupStableDecay(1e-3, 1000, decay_shape="cosine")
