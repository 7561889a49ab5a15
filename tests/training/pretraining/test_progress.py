"""Progress lines, TensorBoard scalars and the summary of a pre-training run."""

import numpy as np
import pytest
import tensorflow as tf

from tests.training.pretraining_data import read_losses

from kbert.training.pretraining.progress import Interval
from kbert.training.pretraining.progress import Progress
from kbert.training.pretraining.progress import write_step_losses

# Each step's statistics vector: a [2] part and a scalar, as make_train_loop lays them out.
LAYOUT = [("correct", (2,)), ("weight", ())]


class _Pretrainer:
    """Just what Interval asks of a pre-trainer: its metrics and their progress labels."""

    progress_labels = {"masked_lm_accuracy": "mlm_acc", "next_sentence_accuracy": "nsp_acc"}

    def __init__(self, next_sentence=True):
        self.next_sentence = next_sentence
        self.sums = None

    def pretraining_metrics(self, sums):
        self.sums = sums
        return {"masked_lm_accuracy": float(sums["correct"][0] / sums["weight"]),
                "masked_lm_loss": 2.5,
                "next_sentence_accuracy": (float(sums["correct"][1] / sums["weight"])
                                           if self.next_sentence else None)}


def _interval(pretrainer):
    interval = Interval(pretrainer, LAYOUT)
    # Two calls: 3 steps, then 1; 8 examples a step.
    interval.add(np.array([3.0, 2.0, 1.0]), np.array([[1, 2, 4], [1, 0, 4], [2, 2, 4]]), 24, 2.0)
    interval.add(np.array([2.0]), np.array([[0, 4, 4]]), 8, 2.0)
    return interval


def test_the_progress_line_shows_the_intervals_means_and_the_labelled_metrics(tmp_path):
    pretrainer, lines = _Pretrainer(), []
    writer = tf.summary.create_file_writer(str(tmp_path))
    values = _interval(pretrainer).report(8, 16, 1e-4, writer, lines.append)
    writer.flush()
    np.testing.assert_array_equal(pretrainer.sums["correct"], [4, 8])
    assert pretrainer.sums["weight"] == 16 and pretrainer.sums["correct"].shape == (2,)
    assert lines == ["step 8/16  loss 2.0000  mlm_acc 0.2500  nsp_acc 0.5000  lr 1.000e-04  "
                     "examples/s 8.0"]
    assert values == {"loss": 2.0, "masked_lm_accuracy": 0.25, "masked_lm_loss": 2.5,
                      "next_sentence_accuracy": 0.5, "learning_rate": 1e-4,
                      "examples_per_second": 8.0}
    # Every value but the loss (written per step) is a scalar at the interval's last step.
    for tag, value in (("masked_lm_accuracy", 0.25), ("masked_lm_loss", 2.5),
                       ("learning_rate", 1e-4), ("examples_per_second", 8.0)):
        assert read_losses(str(tmp_path), tag) == ([pytest.approx(value)], [8])
    assert read_losses(str(tmp_path)) == ([], [])


def test_a_metric_the_model_does_not_measure_is_left_out_of_the_line_and_the_scalars(tmp_path):
    lines = []
    writer = tf.summary.create_file_writer(str(tmp_path))
    values = _interval(_Pretrainer(next_sentence=False)).report(4, 4, 5e-5, writer, lines.append)
    writer.flush()
    assert lines == ["step 4/4  loss 2.0000  mlm_acc 0.2500  lr 5.000e-05  examples/s 8.0"]
    assert values["next_sentence_accuracy"] is None
    assert read_losses(str(tmp_path), "next_sentence_accuracy") == ([], [])


def test_step_losses_are_written_at_their_own_steps(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path))
    write_step_losses(writer, np.array([3.0, 2.5]), 5)
    writer.flush()
    assert read_losses(str(tmp_path)) == ([3.0, 2.5], [5, 6])


def test_the_summary_holds_the_last_line_and_the_untraced_speed():
    last = {"loss": 2.0, "masked_lm_accuracy": 0.25, "masked_lm_loss": 2.5,
            "next_sentence_accuracy": None, "learning_rate": 1e-4, "examples_per_second": 8.0}
    progress = Progress(step=16, last=last, timed_examples=96, timed_seconds=4.0)
    assert progress.summary(4, wall_seconds=30.0) == {
        "global_step": 16, "loss": 2.0, "masked_lm_accuracy": 0.25, "masked_lm_loss": 2.5,
        "next_sentence_accuracy": None, "examples_per_second": 24.0, "resumed_from_step": 4,
        "wall_seconds": 30.0}
    # One call only (the traced one): the last line's speed.
    assert Progress(step=16, last=last).summary(0, 1.0)["examples_per_second"] == 8.0
    # No step ran: the accuracies are there, as None.
    assert Progress(step=16).summary(16, 1.0) == {
        "global_step": 16, "loss": None, "masked_lm_accuracy": None,
        "next_sentence_accuracy": None, "examples_per_second": None, "resumed_from_step": 16,
        "wall_seconds": 1.0}
