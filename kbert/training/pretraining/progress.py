"""Progress of a pre-training run: progress lines, TensorBoard scalars and the summary.

Every `log_every_steps` the loop prints one line of the interval's means,

    step 400/1000  loss 6.1234  mlm_acc 0.1234  nsp_acc 0.5678  lr 1.000e-04  examples/s 512.3

(the metrics shown are the pre-trainer's `progress_labels`) and writes the same
values as TensorBoard scalars into `model_dir`, beside the loss of every step.
`Progress.summary` is what `run_pretraining` returns and writes to summary.json.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from typing import Callable

import keras
import numpy as np
import tensorflow as tf


@dataclasses.dataclass
class Progress:
    """Where the train loop stopped and what it measured.

    Example:

    >>> progress = Progress(step=resumed_from_step)
    >>> progress.last = interval.report(...)
    >>> progress.summary(resumed_from_step, wall_seconds=120.0)["loss"]
    """

    step: int
    # The values of the last progress line (empty when no step ran).
    last: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Examples and seconds of every call but the first, which traces the step.
    timed_examples: int = 0
    timed_seconds: float = 0.0

    def summary(self, resumed_from_step: int, wall_seconds: float) -> dict[str, Any]:
        """Returns the dict `run_pretraining` returns and writes to summary.json."""
        # The last progress line's metrics: always the MLM and NSP accuracies
        # (None when not measured), and whatever else the pre-trainer reports.
        metrics = {"masked_lm_accuracy": None, "next_sentence_accuracy": None,
                   **{k: v for k, v in self.last.items()
                      if k not in ("loss", "learning_rate", "examples_per_second")}}
        return {
            "global_step": self.step,
            "loss": self.last.get("loss"),
            **metrics,
            "examples_per_second": (self.timed_examples / self.timed_seconds
                                    if self.timed_seconds
                                    else self.last.get("examples_per_second")),
            "resumed_from_step": resumed_from_step,
            "wall_seconds": wall_seconds,
        }


class Interval:
    """Sums per-step statistics between two progress lines, then reports them.

    Args:
        pretrainer: the model being trained; its `pretraining_metrics` turns
            the summed statistics into metrics and its `progress_labels`
            name those shown on the progress line.
        layout: list of `(name, shape)`. The parts of each step's statistics
            vector, in order (`make_train_loop`'s `layout`).

    Example:

    >>> interval = Interval(pretrainer, layout)
    >>> interval.add(losses, statistics, examples=num_steps * batch_size, seconds=1.5)
    >>> values = interval.report(step, num_train_steps, 1e-4, writer, print)
    """

    def __init__(self, pretrainer: keras.Model, layout: list[tuple[str, tuple[int, ...]]]):
        self.pretrainer, self.layout = pretrainer, layout
        self.steps, self.loss, self.statistics = 0, 0.0, 0.0
        self.examples, self.seconds = 0, 0.0

    def add(self, losses: np.ndarray, statistics: np.ndarray, examples: int,
            seconds: float) -> None:
        """Adds one `train_loop` call: per-step losses `[steps]` and statistics `[steps, size]`."""
        self.steps += len(losses)
        self.loss += float(losses.sum())
        self.statistics = self.statistics + statistics.astype(np.float64).sum(axis=0)
        self.examples += examples
        self.seconds += seconds

    def sums(self) -> dict[str, np.ndarray]:
        """The summed statistics by name, in their shapes."""
        sums, offset = {}, 0
        for name, shape in self.layout:
            size = int(np.prod(shape))
            sums[name] = np.reshape(self.statistics[offset:offset + size], shape)
            offset += size
        return sums

    def report(self, step: int, total: int, learning_rate: float,
               writer: tf.summary.SummaryWriter, print_fn: Callable[[str], None]
               ) -> dict[str, Any]:
        """Writes the interval's scalars, prints its progress line and returns its values.

        Args:
            step: int. The step reached.
            total: int. `num_train_steps`.
            learning_rate: float. The optimizer's current learning rate.
            writer: the TensorBoard writer (a no-op one on non-chief workers).
            print_fn: callable taking the progress line.

        Returns:
            dict: `loss` (the interval's mean), the pre-trainer's metrics,
            `learning_rate` and `examples_per_second`.
        """
        metrics = self.pretrainer.pretraining_metrics(self.sums())
        values = {
            "loss": self.loss / self.steps,
            **metrics,
            "learning_rate": learning_rate,
            "examples_per_second": self.examples / max(self.seconds, 1e-9),
        }
        with writer.as_default():
            for name, value in values.items():
                if name != "loss" and value is not None:
                    write_scalar(name, value, step)
        # Metrics the model labels for the progress line; None ones (an
        # MLM-only model's NSP accuracy) are left out.
        shown = "".join(f"{label} {metrics[name]:.4f}  "
                        for name, label in self.pretrainer.progress_labels.items()
                        if metrics.get(name) is not None)
        print_fn(f"step {step}/{total}  loss {values['loss']:.4f}  {shown}"
                 f"lr {learning_rate:.3e}  examples/s {values['examples_per_second']:.1f}")
        return values


def write_step_losses(writer: tf.summary.SummaryWriter, losses: np.ndarray,
                      first_step: int) -> None:
    """Writes the loss of every step of one call, the first being `first_step`."""
    with writer.as_default():
        for i, loss in enumerate(losses):
            write_scalar("loss", loss, first_step + i)


def write_scalar(name: str, value: float, step: int) -> None:
    """Writes one TensorBoard scalar to the default summary writer."""
    # tf.summary.scalar lives in the tensorboard package, which TF no longer
    # installs; write the same scalar event with core TF instead.
    metadata = tf.compat.v1.SummaryMetadata(data_class="DATA_CLASS_SCALAR")
    metadata.plugin_data.plugin_name = "scalars"
    tf.summary.write(name, tf.constant(value, tf.float32), step=step, metadata=metadata)


def current_learning_rate(optimizer: keras.optimizers.Optimizer) -> float:
    """The learning rate the optimizer (or the one a loss-scale optimizer wraps) uses now."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    return float(keras.ops.convert_to_numpy(inner.learning_rate))

