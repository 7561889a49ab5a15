"""The warmup-stable-decay learning-rate schedule (ModernBERT's "trapezoidal" schedule)."""

from __future__ import annotations

import dataclasses

import keras

# How the rate falls over the decay phase: straight to zero, or as 1 - sqrt(progress).
DECAY_SHAPES = ("linear", "1-sqrt")


@dataclasses.dataclass(frozen=True)
class StableDecay:
    """`run_pretraining.stable_decay`: warmup, a constant rate, then a decay over the last steps.

    Given to `kbert.training.create_optimizer` (or, through gin,
    `run_pretraining.stable_decay = @StableDecay()`), the rate follows
    `WarmupStableDecay` instead of BERT's linear decay from step 0; any
    pre-trainer, BERT's included, can use it.

    Args:
        decay_fraction: float in [0, 1]. Share of `num_train_steps` at the end
            over which the rate decays to 0. Defaults to 0.1.
        decay_shape: str. `"linear"` or `"1-sqrt"`. Defaults to `"linear"`.

    Example:

    >>> kbert.training.create_optimizer(8e-4, 100000, 3000,
    ...                                 stable_decay=StableDecay(0.1, "1-sqrt"))
    """

    decay_fraction: float = 0.1
    decay_shape: str = "linear"


@keras.saving.register_keras_serializable(package="kbert")
class WarmupStableDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup to a peak rate, constant at the peak, then a decay to zero at the end.

    With `D = round(total_steps * decay_fraction)` decay steps starting at
    `S = total_steps - D`: for `step < warmup_steps` the rate is
    `peak * step / warmup_steps`; until `S` it is `peak`; then, with
    `p = (step - S) / D`, `peak * (1 - p)` (`"linear"`) or
    `peak * (1 - sqrt(p))` (`"1-sqrt"`, Hägele et al. 2024), and 0 from
    `total_steps` on. A checkpoint taken during the stable phase can be
    decayed later or trained on (ModernBERT's context extension continues
    at the stable rate). Keras has no such schedule, hence this class.

    Args:
        peak_learning_rate: float. The rate warmup climbs to and the stable
            phase keeps.
        total_steps: int. Step at which the rate reaches 0 (usually
            `num_train_steps`).
        warmup_steps: int. Steps of linear warmup. Defaults to 0.
        decay_fraction: float in [0, 1]. Share of `total_steps` the decay
            takes. Defaults to 0.1.
        decay_shape: str. `"linear"` or `"1-sqrt"`. Defaults to `"linear"`.

    Example:

    >>> schedule = kbert.training.WarmupStableDecay(1e-3, total_steps=1000,
    ...                                             warmup_steps=100, decay_fraction=0.2)
    >>> [float(schedule(step)) for step in (50, 500, 900, 1000)]
    [0.0005, 0.001, 0.0005, 0.0]

    Reference:
        - [Hägele et al., 2024](https://arxiv.org/abs/2405.18392)
        - [Warner et al., 2024](https://arxiv.org/abs/2412.13663)
    """

    def __init__(self, peak_learning_rate: float, total_steps: int, warmup_steps: int = 0,
                 decay_fraction: float = 0.1, decay_shape: str = "linear"):
        if total_steps <= 0:
            raise ValueError(f"`total_steps={total_steps}` must be positive (usually "
                             "num_train_steps).")
        if not 0.0 <= decay_fraction <= 1.0:
            raise ValueError(f"StableDecay.decay_fraction={decay_fraction} must be in [0, 1].")
        if decay_shape not in DECAY_SHAPES:
            raise ValueError(f"StableDecay.decay_shape={decay_shape!r} is not one of "
                             f"{DECAY_SHAPES}.")
        decay_steps = round(total_steps * decay_fraction)
        if warmup_steps < 0 or warmup_steps + decay_steps > total_steps:
            raise ValueError(
                f"num_warmup_steps={warmup_steps} and the {decay_steps} decay steps "
                f"(StableDecay.decay_fraction={decay_fraction}) do not fit in "
                f"num_train_steps={total_steps}; shorten one of them.")
        self.peak_learning_rate = peak_learning_rate
        self.total_steps = total_steps
        self.warmup_steps = warmup_steps
        self.decay_fraction = decay_fraction
        self.decay_shape = decay_shape
        self.decay_steps = decay_steps

    def __call__(self, step):
        ops = keras.ops
        step = ops.cast(step, "float32")
        peak = ops.cast(self.peak_learning_rate, "float32")
        rate = peak * ops.ones_like(step)
        if self.decay_steps:
            start = float(self.total_steps - self.decay_steps)
            progress = ops.clip((step - start) / float(self.decay_steps), 0.0, 1.0)
            left = 1.0 - (progress if self.decay_shape == "linear" else ops.sqrt(progress))
            rate = peak * left
        if self.warmup_steps:
            rate = ops.where(step < float(self.warmup_steps),
                             peak * step / float(self.warmup_steps), rate)
        return rate

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "decay_fraction": self.decay_fraction,
            "decay_shape": self.decay_shape,
        }
