"""DevEvaluation + Keras EarlyStopping: the best dev step's weights are kept, early stopping stops.

A one-layer Keras model trains on random data while a scripted "dev metric"
peaks mid-way; each evaluation snapshots the weights, so the kept model can be
compared with the model of every step.
"""

import keras
import numpy as np
import pytest

from kbert.tasks import Evaluation
from kbert.training.finetuning.dev_evaluation import DevEvaluation
from kbert.training.finetuning.dev_evaluation import best_checkpoint_callbacks

STEPS = 2  # steps per Keras epoch (evaluation interval)


class Scripted:
    """`evaluate(model)` returning the next scripted score, snapshotting the weights."""

    def __init__(self, scores):
        self.scores = list(scores)
        self.snapshots = []

    def __call__(self, model):
        self.snapshots.append([w.copy() for w in model.get_weights()])
        return Evaluation({"score": self.scores[len(self.snapshots) - 1], "num_examples": 4},
                          {"predictions.txt": f"evaluation {len(self.snapshots)}\n"})


def _fit(scores, keep_best=True, patience=0, split="dev"):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 3)), rng.normal(size=(8, 1))
    scripted = Scripted(scores)
    evaluation = DevEvaluation(scripted, "score", STEPS, steps_per_data_epoch=STEPS,
                               total_steps=STEPS * len(scores), split=split)
    history = model.fit(x, y, batch_size=4, epochs=len(scores), verbose=0,
                        callbacks=best_checkpoint_callbacks(evaluation, keep_best, patience,
                                                            len(scores)))
    return model, evaluation, scripted, history


def _same(weights, snapshot):
    return all(np.array_equal(a, b) for a, b in zip(weights, snapshot))


def test_the_weights_of_the_best_step_are_kept():
    model, evaluation, scripted, history = _fit([0.5, 0.7, 0.9, 0.6, 0.8])
    assert len(history.history["loss"]) == 5  # no early stop: patience 0 is off
    assert _same(model.get_weights(), scripted.snapshots[2])
    assert not _same(model.get_weights(), scripted.snapshots[4])  # training did move on
    assert evaluation.best_step == 3 * STEPS
    assert evaluation.best.metrics["score"] == 0.9
    assert evaluation.best.files == {"predictions.txt": "evaluation 3\n"}
    assert [(p.step, p.epoch, p.metrics) for p in evaluation.curve] == [
        (2, 1.0, {"score": 0.5}), (4, 2.0, {"score": 0.7}), (6, 3.0, {"score": 0.9}),
        (8, 4.0, {"score": 0.6}), (10, 5.0, {"score": 0.8})]
    # The dev scores are in the epoch logs, so Keras' History (and progress bar) show them.
    assert history.history["dev_score"] == [0.5, 0.7, 0.9, 0.6, 0.8]


def test_a_tie_keeps_the_first_maximum_and_keep_best_false_keeps_the_last():
    model, evaluation, scripted, _ = _fit([0.4, 0.9, 0.9, 0.3])
    assert evaluation.best_step == 2 * STEPS and _same(model.get_weights(), scripted.snapshots[1])
    model, evaluation, scripted, _ = _fit([0.4, 0.9, 0.3], keep_best=False)
    assert _same(model.get_weights(), scripted.snapshots[2])
    assert evaluation.last.metrics["score"] == 0.3 and evaluation.best_step == 2 * STEPS


def test_early_stopping_stops_after_patience_evaluations_without_improvement():
    model, evaluation, scripted, history = _fit([0.5, 0.8, 0.7, 0.6, 0.95, 0.99], patience=2)
    assert len(history.history["loss"]) == 4 and len(scripted.snapshots) == 4
    assert [p.step for p in evaluation.curve] == [2, 4, 6, 8]
    assert _same(model.get_weights(), scripted.snapshots[1])


def test_a_main_metric_the_task_does_not_report_is_named():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    evaluation = DevEvaluation(Scripted([0.5]), "f1", 1, 1, 1)
    with pytest.raises(ValueError, match=r"main_metric 'f1' is not among its dev metrics "
                                         r"\['num_examples', 'score'\]"):
        model.fit(np.zeros((2, 3)), np.zeros((2, 1)), epochs=1, verbose=0,
                  callbacks=[evaluation])


def test_a_heldout_split_is_named_so_in_the_logs_and_early_stopping_watches_it(caplog):
    """With `selection_fraction` the scored split is carved from training data: its scores are
    `heldout_*`, not `dev_*`, in Keras's logs and in the log line, and still pick the step."""
    caplog.set_level("INFO", logger="kbert.training.finetuning.dev_evaluation")
    model, evaluation, scripted, history = _fit([0.5, 0.8, 0.7, 0.6], patience=2,
                                                split="heldout")
    assert history.history["heldout_score"] == [0.5, 0.8, 0.7, 0.6]
    assert not any(key.startswith("dev_") for key in history.history)
    assert _same(model.get_weights(), scripted.snapshots[1])  # stopped after 2 without gain
    assert "step 8/8: heldout score 0.6000 (best 0.8000 at step 4)" in caplog.text
