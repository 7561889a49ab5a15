"""Evaluation on the dev split during fine-tuning, as Keras callbacks.

`run_finetuning` makes each Keras epoch one evaluation interval (a data epoch,
or `eval_every_steps` steps), so that Keras's own machinery does the rest:
`DevEvaluation` scores the model with the task's official scorer at the end of
each interval and puts the scores into the epoch's logs as `dev_<metric>`
(the progress bar and `History` show them), and `keras.callbacks.EarlyStopping`
watches `dev_<main metric>`, keeps the best weights and stops after
`patience` evaluations without improvement.

`DevEvaluation` is hand-written because the scores are not Keras metrics:
SQuAD's come from n-best post-processing over whole questions and NER's from
conlleval's entity matching, both in Python over the whole split.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

import keras

from kbert.tasks import Evaluation

logger = logging.getLogger(__name__)
PREFIX = "dev_"


@dataclasses.dataclass
class CurvePoint:
    """One evaluation during training: the step, the fraction of data epochs, the metrics."""

    step: int
    epoch: float
    metrics: dict[str, Any]


class DevEvaluation(keras.callbacks.Callback):
    """Scores the model on the dev split (or a held-out selection split) at the end of every
    Keras epoch.

    Keeps the metric curve and the `Evaluation` (metrics and files, such as
    SQuAD's `predictions.json`) of the best and of the latest evaluation, so
    that the kept model's outputs need no second evaluation. "Best" is the
    first maximum of `main_metric`, as `keras.callbacks.EarlyStopping` with
    `mode="max"` counts it.

    Args:
        evaluate: callable. `evaluate(model) -> kbert.tasks.Evaluation`.
        main_metric: str. The metric that selects the best step (higher is better).
        steps_per_interval: int. Training steps per Keras epoch.
        steps_per_data_epoch: int. Training steps per pass over the data.
        total_steps: int. Steps of the whole run.
        split: str. The scored split's name in the log line and in Keras's logs
            (`dev_accuracy`); `heldout` when the split was carved from the
            training data (`selection_fraction`), so nobody reads it as dev.

    Example:

    >>> evaluation = DevEvaluation(lambda m: task.evaluate(m, dev, preprocessor, 64),
    ...                            "accuracy", 125, 125, 375)
    >>> model.fit(data, epochs=3, steps_per_epoch=125, callbacks=[evaluation])
    """

    def __init__(self, evaluate: Callable[[keras.Model], Evaluation], main_metric: str,
                 steps_per_interval: int, steps_per_data_epoch: int, total_steps: int,
                 split: str = "dev"):
        super().__init__()
        self.evaluate = evaluate
        self.split = split
        self.prefix = PREFIX if split == "dev" else f"{split}_"  # Keras's log keys
        self.main_metric = main_metric
        self.steps_per_interval = steps_per_interval
        self.steps_per_data_epoch = steps_per_data_epoch
        self.total_steps = total_steps
        self.curve: list[CurvePoint] = []
        self.best: Evaluation | None = None
        self.best_step: int | None = None
        self.last: Evaluation | None = None

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        step = min((epoch + 1) * self.steps_per_interval, self.total_steps)
        evaluation = self.evaluate(self.model)
        if self.main_metric not in evaluation.metrics:
            raise ValueError(f"the task's main_metric {self.main_metric!r} is not among its "
                             f"{self.split} metrics {sorted(evaluation.metrics)}.")
        value = evaluation.metrics[self.main_metric]
        if self.best is None or value > self.best.metrics[self.main_metric]:
            self.best, self.best_step = evaluation, step
        self.last = evaluation
        numbers = {k: v for k, v in evaluation.metrics.items()
                   if isinstance(v, (int, float)) and k != "num_examples"}
        self.curve.append(CurvePoint(step, round(step / self.steps_per_data_epoch, 3), numbers))
        if logs is not None:
            logs.update({self.prefix + name: v for name, v in numbers.items()})
        logger.info("step %d/%d: %s %s %.4f (best %.4f at step %d)", step, self.total_steps,
                    self.split, self.main_metric, value, self.best.metrics[self.main_metric],
                    self.best_step)


def best_checkpoint_callbacks(evaluation: DevEvaluation, keep_best: bool,
                              early_stopping_patience: int,
                              num_intervals: int) -> list[keras.callbacks.Callback]:
    """`evaluation`, then Keras's `EarlyStopping` watching its main metric.

    Args:
        evaluation: `DevEvaluation`; it must run first so that the logs hold
            its scores when `EarlyStopping` reads them.
        keep_best: bool. Restore the weights of the best evaluation when
            training ends (else the last weights are kept).
        early_stopping_patience: int. Stop after this many evaluations without
            improvement; 0 never stops early.
        num_intervals: int. Evaluations in the whole run.

    Returns:
        list of callbacks for `model.fit`.
    """
    patience = early_stopping_patience or num_intervals  # never reached: no early stop
    stopping = keras.callbacks.EarlyStopping(
        monitor=evaluation.prefix + evaluation.main_metric, mode="max", patience=patience,
        restore_best_weights=keep_best, verbose=0)
    return [evaluation, stopping]
