"""BERT's learning-rate schedule: linear warmup, then linear decay to zero."""

from __future__ import annotations

import keras


@keras.saving.register_keras_serializable(package="kbert")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup to a peak rate, then linear decay to zero, as in BERT.

    For `step < warmup_steps` the rate is `peak * step / warmup_steps`; after
    that it is `peak * (1 - step / decay_steps)`, floored at 0. As in
    google-research/bert's `optimization.py` the decay is measured from step 0
    (not from the end of warmup), so the rate at the end of warmup is
    `peak * (1 - warmup_steps / decay_steps)`. Keras has linear decay
    (`PolynomialDecay(power=1)`) and cosine decay with warmup, but no linear
    warmup before linear decay, hence this class.

    Args:
        peak_learning_rate: float. The rate warmup climbs to.
        decay_steps: int. Step at which the rate reaches 0 (usually
            `num_train_steps`).
        warmup_steps: int. Steps of linear warmup. Defaults to 0.

    Example:

    >>> schedule = kbert.training.WarmupLinearDecay(1e-4, decay_steps=1000,
    ...                                             warmup_steps=100)
    >>> float(schedule(50)), float(schedule(1000))
    (5e-05, 0.0)

    Reference:
        - [Devlin et al., 2019](https://arxiv.org/abs/1810.04805)
    """

    def __init__(self, peak_learning_rate: float, decay_steps: int, warmup_steps: int = 0):
        if decay_steps <= 0:
            raise ValueError(f"`decay_steps={decay_steps}` must be positive (usually num_train_steps).")
        if warmup_steps < 0:
            raise ValueError(f"`warmup_steps={warmup_steps}` must be >= 0.")
        self.peak_learning_rate = peak_learning_rate
        self.decay_steps = decay_steps
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        peak = keras.ops.cast(self.peak_learning_rate, "float32")
        decayed = peak * keras.ops.maximum(1.0 - step / float(self.decay_steps), 0.0)
        if not self.warmup_steps:
            return decayed
        warmup = peak * step / float(self.warmup_steps)
        return keras.ops.where(step < float(self.warmup_steps), warmup, decayed)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "decay_steps": self.decay_steps,
            "warmup_steps": self.warmup_steps,
        }
