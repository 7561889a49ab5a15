"""How long a fine-tuning or distillation run trains: Keras epochs between dev evaluations.

`run_finetuning` and `run_distillation` both train on this schedule: a Keras
epoch is one evaluation interval, so that Keras's callbacks (`DevEvaluation`,
`EarlyStopping`) run at each evaluation.
"""

from __future__ import annotations

import dataclasses
import math

from kbert.training.finetuning import auto_settings


@dataclasses.dataclass(frozen=True)
class TrainingSchedule:
    """How long training runs: `num_intervals` Keras epochs of `interval` steps each.

    A Keras epoch is one evaluation interval: a data epoch (`steps_per_data_epoch`
    steps), or `eval_every_steps` steps.
    """

    num_intervals: int
    interval: int
    steps_per_data_epoch: int
    warmup_steps: int

    @property
    def total_steps(self) -> int:
        return self.num_intervals * self.interval


def training_schedule(num_rows: int, batch_size: int, num_train_epochs: float,
                      warmup_proportion: float | str, eval_every_steps: int) -> TrainingSchedule:
    """Splits a fine-tuning run into Keras epochs between dev evaluations.

    kbert-finetune and kbert-distill both train on this schedule.

    Args:
        num_rows: Training rows (examples, windows or packed rows).
        batch_size: Global batch size.
        num_train_epochs: Passes over the data (already resolved from `"auto"`).
        warmup_proportion: A fraction of the steps, or `"auto"`.
        eval_every_steps: Steps between dev evaluations; 0 evaluates once per epoch.

    Returns:
        The number of Keras epochs, the steps in each, the steps per pass over the
        data and the warm-up steps.

    Example:
        >>> training_schedule(4000, 32, 3.0, 0.1, 0).interval
        125
    """
    # Fractional epochs round to whole steps, spread evenly over whole Keras
    # epochs; with eval_every_steps a Keras epoch is that many steps and the run
    # is rounded up to whole ones.
    steps_per_data_epoch = math.ceil(num_rows / batch_size)
    total_steps = max(1, round(steps_per_data_epoch * num_train_epochs))
    if eval_every_steps:
        interval = min(eval_every_steps, total_steps)
        num_intervals = math.ceil(total_steps / interval)
    else:
        num_intervals = math.ceil(num_train_epochs)
        interval = math.ceil(total_steps / num_intervals)
    warmup_steps = auto_settings.resolve_warmup_steps(warmup_proportion, num_intervals * interval)
    return TrainingSchedule(num_intervals, interval, steps_per_data_epoch, warmup_steps)
