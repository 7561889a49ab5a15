"""Did a fine-tuning or distillation run learn? The two failures a summary must not hide.

A run can end with rc 0 and a saved model that learned nothing: a student
whose layers cannot carry the teacher's signal (`kbert-distill
--student_layers=0,2` trained at a flat loss of 1.165, 1.168, 1.159 to a
student that predicts one class), or a learning rate that diverged. The kept
model is still written (it is what was asked for), but the summary, its
closing line and `eval_results.json["warnings"]` say so.
"""

from __future__ import annotations

from typing import Any

# Training loss that fell by less than this fraction of its first epoch's value did not fall.
FLAT_LOSS_FRACTION = 0.01


def outcome_warnings(results: dict[str, Any]) -> list[str]:
    """The warnings a run's results call for: a flat training loss, a majority-class model.

    Args:
        results: dict. A run's results: `train_loss` (per epoch or interval),
            `main_metric` and its dev value, and `majority_baseline` (the main
            metric of predicting the most frequent dev label for every example,
            which classification tasks report).

    Returns:
        list of str: one sentence per problem found (empty when none).

    Example:

    >>> outcome_warnings({"train_loss": [1.165, 1.168, 1.159]})
    ['training loss did not fall: 1.1650 in the first epoch, 1.1590 in the last (3 epochs); ...']
    """
    found = []
    losses = results.get("train_loss") or []
    if len(losses) >= 2 and losses[-1] > losses[0] * (1 - FLAT_LOSS_FRACTION):
        found.append(
            f"training loss did not fall: {losses[0]:.4f} in the first epoch, {losses[-1]:.4f} in "
            f"the last ({len(losses)} epochs); the model learned little: try another learning "
            "rate, more epochs, or (distillation) other --student_layers.")
    metric = results.get("main_metric")
    baseline = results.get("majority_baseline")
    if metric in results and baseline is not None and results[metric] <= baseline:
        found.append(
            f"dev {metric} {results[metric]:.4f} is no better than predicting the most frequent "
            f"dev label for every example ({baseline:.4f}): the kept model has not learned the task.")
    return found
