"""The run-outcome warnings: a flat training loss and a majority-class model, on hand-worked values."""

import numpy as np
import pytest

from kbert.tasks import get_task
from kbert.tasks.glue_reader import GlueExample
from kbert.training.finetuning.outcome_checks import outcome_warnings


def test_the_flat_loss_of_the_issue_warns_and_a_falling_one_does_not():
    # kbert-distill --student_layers=0,2's losses, as the issue reports them.
    (warning,) = outcome_warnings({"train_loss": [1.165, 1.168, 1.159]})
    assert warning.startswith("training loss did not fall: 1.1650 in the first epoch, 1.1590 in "
                              "the last (3 epochs)")
    assert outcome_warnings({"train_loss": [1.165, 1.15]}) == []  # 1.3% lower
    assert outcome_warnings({"train_loss": [1.165]}) == []  # one epoch: nothing to compare


def test_a_dev_metric_at_the_majority_level_warns():
    results = {"main_metric": "accuracy", "accuracy": 0.509, "majority_baseline": 0.509}
    (warning,) = outcome_warnings(results)
    assert warning == ("dev accuracy 0.5090 is no better than predicting the most frequent dev "
                       "label for every example (0.5090): the kept model has not learned the task.")
    assert outcome_warnings({**results, "accuracy": 0.778}) == []
    assert outcome_warnings({"main_metric": "spearman", "spearman": 0.1}) == []  # no baseline


def test_glue_classification_reports_the_majority_baseline_of_its_main_metric():
    task = get_task("glue")(task_name="mrpc")
    labels = [1, 1, 0, 1, 0]
    examples = [GlueExample(guid=f"dev-{i}", text_a="a", text_b="b", label=label)
                for i, label in enumerate(labels)]
    predictions = np.asarray([1, 0, 0, 1, 1])
    task._scores = lambda *args: predictions  # the model's answers, fixed by hand
    metrics = task.evaluate(None, examples, None, 8).metrics
    # Majority label 1 for all five: precision 3/5, recall 1, F1 = 2 * 0.6 / 1.6 = 0.75.
    assert metrics["majority_baseline"] == pytest.approx(0.75, abs=1e-12)
    # The answers: tp 2, fp 1, fn 1 -> F1 2/3; accuracy 3/5.
    assert (round(metrics["f1"], 6), metrics["accuracy"]) == (round(2 / 3, 6), 0.6)
