"""Classification and regression metrics with the official semantics, in plain numpy.

Each function takes gold values first, then predictions, like scikit-learn.
They are hand-written (rather than pulling scikit-learn and scipy into the
install) because each is a few lines and the semantics must match the
reference scripts exactly:

- `accuracy`, `f1_score` (binary, positive class 1), `matthews_corrcoef`:
  as scikit-learn computes them (GLUE's scorer uses scikit-learn).
- `pearson_corrcoef`, `spearman_corrcoef`: as scipy computes them (average
  ranks for ties); `mean_squared_error` as scikit-learn.
- `class_scores`, `macro_f1`, `confusion_matrix` (any number of classes) and
  `multi_label_scores` (micro/macro F1, subset accuracy): scikit-learn's
  `precision_recall_fscore_support`, `f1_score(average="macro"|"micro")`,
  `confusion_matrix` and `accuracy_score` on indicator arrays, with
  `zero_division=0`; `choose_threshold`, the multi-label decision threshold.

Task-specific metrics live with their task: entity F1 in `kbert.tasks.token_classification.metrics`,
SQuAD exact match and F1 in `kbert.tasks.squad.metrics`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def accuracy(labels: Sequence, predictions: Sequence) -> float:
    """Fraction of predictions equal to the labels.

    Args:
        labels: sequence of gold labels.
        predictions: sequence of predicted labels, same length.

    Returns:
        float in [0, 1]; 0.0 for empty input.

    Example:

    >>> accuracy([1, 0, 1], [1, 1, 1])
    0.666...
    """
    labels, predictions = _same_length(labels, predictions)
    if labels.size == 0:
        return 0.0
    return float(np.mean(labels == predictions))


def f1_score(labels: Sequence[int], predictions: Sequence[int], positive: int = 1) -> float:
    """Binary F1 of the positive class (MRPC, QQP).

    Args:
        labels: sequence of gold labels.
        predictions: sequence of predicted labels.
        positive: the positive class. Defaults to 1.

    Returns:
        float in [0, 1]; 0.0 when there are no true positives (as scikit-learn
        with `zero_division=0`).

    Example:

    >>> f1_score([1, 1, 0, 0], [1, 0, 1, 0])
    0.5
    """
    labels, predictions = _same_length(labels, predictions)
    true_positives = np.sum((predictions == positive) & (labels == positive))
    predicted = np.sum(predictions == positive)
    actual = np.sum(labels == positive)
    return f1_from_counts(true_positives, predicted, actual)


def matthews_corrcoef(labels: Sequence[int], predictions: Sequence[int]) -> float:
    """Matthews correlation coefficient for binary labels (CoLA).

    Args:
        labels: sequence of gold labels in {0, 1}.
        predictions: sequence of predicted labels in {0, 1}.

    Returns:
        float in [-1, 1]; 0.0 when any marginal is empty (e.g. only one class
        predicted), as scikit-learn returns.

    Example:

    >>> matthews_corrcoef([1, 1, 0, 0], [1, 0, 0, 0])
    0.577...
    """
    labels, predictions = _same_length(labels, predictions)
    tp = float(np.sum((predictions == 1) & (labels == 1)))
    tn = float(np.sum((predictions != 1) & (labels != 1)))
    fp = float(np.sum((predictions == 1) & (labels != 1)))
    fn = float(np.sum((predictions != 1) & (labels == 1)))
    denominator = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    if denominator == 0:
        return 0.0
    return float((tp * tn - fp * fn) / np.sqrt(denominator))


def pearson_corrcoef(labels: Sequence[float], predictions: Sequence[float]) -> float:
    """Pearson correlation (STS-B).

    Args:
        labels: sequence of gold scores.
        predictions: sequence of predicted scores.

    Returns:
        float in [-1, 1]; 0.0 when either side is constant (undefined).

    Example:

    >>> pearson_corrcoef([1.0, 2.0, 3.0], [2.0, 4.0, 7.0])
    0.993...
    """
    labels, predictions = _same_length(labels, predictions)
    x = labels.astype(np.float64) - np.mean(labels)
    y = predictions.astype(np.float64) - np.mean(predictions)
    denominator = np.sqrt(np.sum(x * x) * np.sum(y * y))
    if denominator == 0:
        return 0.0
    return float(np.sum(x * y) / denominator)


def spearman_corrcoef(labels: Sequence[float], predictions: Sequence[float]) -> float:
    """Spearman rank correlation (STS-B), ties given their average rank.

    Args:
        labels: sequence of gold scores.
        predictions: sequence of predicted scores.

    Returns:
        float in [-1, 1]; 0.0 when either side is constant.

    Example:

    >>> spearman_corrcoef([1.0, 2.0, 3.0], [2.0, 4.0, 7.0])
    1.0
    """
    labels, predictions = _same_length(labels, predictions)
    return pearson_corrcoef(_average_ranks(labels), _average_ranks(predictions))


def mean_squared_error(labels: Sequence[float], predictions: Sequence[float]) -> float:
    """Mean of the squared differences (regression).

    Args:
        labels: sequence of gold values.
        predictions: sequence of predicted values.

    Returns:
        float; 0.0 for empty input.

    Example:

    >>> mean_squared_error([1.0, 2.0], [1.5, 1.0])
    0.625
    """
    labels, predictions = _same_length(labels, predictions)
    if labels.size == 0:
        return 0.0
    return float(np.mean((labels.astype(np.float64) - predictions.astype(np.float64)) ** 2))


def class_scores(labels: Sequence[int], predictions: Sequence[int],
                 label_names: Sequence[str]) -> dict[str, dict[str, float | int]]:
    """Precision, recall, F1 and support of every class (single-label).

    Args:
        labels: sequence of gold class ids (indices into `label_names`).
        predictions: sequence of predicted class ids.
        label_names: sequence of str. Class names in id order.

    Returns:
        dict: class name -> `{"precision", "recall", "f1", "support"}`
        (support: gold examples of the class), every class listed; a ratio
        with nothing to count is 0.0.

    Example:

    >>> class_scores([0, 1, 1], [0, 1, 0], ["a", "b"])["b"]
    {'precision': 1.0, 'recall': 0.5, 'f1': 0.666..., 'support': 2}
    """
    labels, predictions = _same_length(labels, predictions)
    return {name: _scores(int(np.sum((predictions == i) & (labels == i))),
                          int(np.sum(predictions == i)), int(np.sum(labels == i)))
            for i, name in enumerate(label_names)}


def macro_f1(labels: Sequence[int], predictions: Sequence[int]) -> float:
    """The unweighted mean of the classes' F1, over the classes in the gold or the predictions.

    As scikit-learn's `f1_score(average="macro")` without `labels`: a class
    neither in the gold nor predicted does not count.

    Args:
        labels: sequence of gold class ids.
        predictions: sequence of predicted class ids.

    Returns:
        float in [0, 1]; 0.0 for empty input.

    Example:

    >>> macro_f1([0, 1, 1], [0, 1, 0])  # class 0: F1 2/3, class 1: F1 2/3
    0.666...
    """
    labels, predictions = _same_length(labels, predictions)
    classes = np.union1d(labels, predictions)
    if classes.size == 0:
        return 0.0
    return float(np.mean([f1_from_counts(np.sum((predictions == c) & (labels == c)),
                                         np.sum(predictions == c), np.sum(labels == c))
                          for c in classes]))


def confusion_matrix(labels: Sequence[int], predictions: Sequence[int],
                     label_names: Sequence[str]) -> dict[str, list]:
    """Counts of (true class, predicted class), rows = true classes.

    Args:
        labels: sequence of gold class ids.
        predictions: sequence of predicted class ids.
        label_names: sequence of str. Class names in id order.

    Returns:
        `{"labels": [...], "matrix": [[...], ...]}`: `matrix[i][j]` counts the
        examples of class `labels[i]` predicted as `labels[j]`.

    Example:

    >>> confusion_matrix([0, 1, 1], [0, 1, 0], ["a", "b"])
    {'labels': ['a', 'b'], 'matrix': [[1, 0], [1, 1]]}
    """
    labels, predictions = _same_length(labels, predictions)
    matrix = np.zeros((len(label_names), len(label_names)), dtype=np.int64)
    np.add.at(matrix, (labels.astype(np.int64), predictions.astype(np.int64)), 1)
    return {"labels": list(label_names), "matrix": matrix.tolist()}


def multi_label_scores(labels: np.ndarray, predictions: np.ndarray,
                       label_names: Sequence[str]) -> dict:
    """Micro and macro F1, subset accuracy and per-class scores of multi-label predictions.

    Args:
        labels: `[examples, classes]` 0/1 (or bool) gold indicators.
        predictions: `[examples, classes]` 0/1 (or bool) predicted indicators.
        label_names: sequence of str. Class names in column order.

    Returns:
        dict: `micro_f1` (F1 over every (example, class) decision), `macro_f1`
        (the mean of the classes' F1, every class counted), `subset_accuracy`
        (examples whose whole label set is right) and `per_class` (as
        `class_scores`).

    Example:

    >>> multi_label_scores([[1, 0], [1, 1]], [[1, 1], [1, 0]], ["a", "b"])["micro_f1"]
    0.666...
    """
    labels, predictions = _same_length(np.asarray(labels, bool), np.asarray(predictions, bool))
    correct = np.sum(labels & predictions, axis=0)
    predicted, actual = np.sum(predictions, axis=0), np.sum(labels, axis=0)
    per_class = {name: _scores(int(correct[i]), int(predicted[i]), int(actual[i]))
                 for i, name in enumerate(label_names)}
    return {
        "micro_f1": f1_from_counts(int(correct.sum()), int(predicted.sum()), int(actual.sum())),
        "macro_f1": float(np.mean([row["f1"] for row in per_class.values()])) if per_class else 0.0,
        "subset_accuracy": float(np.mean(np.all(labels == predictions, axis=1)))
        if len(labels) else 0.0,
        "per_class": per_class,
    }


# The decision thresholds `choose_threshold` tries: 0.05, 0.10, ..., 0.95.
THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(1, 20))


def choose_threshold(labels: np.ndarray, probabilities: np.ndarray,
                     candidates: Sequence[float] = THRESHOLDS) -> float:
    """The multi-label decision threshold with the best micro F1 on these examples.

    A class is predicted when its probability is at least the threshold. Ties
    go to the threshold nearest 0.5, then to the lower one.

    Args:
        labels: `[examples, classes]` 0/1 gold indicators.
        probabilities: `[examples, classes]` per-class probabilities.
        candidates: sequence of float. The thresholds tried. Defaults to
            `THRESHOLDS`.

    Returns:
        float, one of `candidates`.

    Example:

    >>> choose_threshold([[1, 0], [0, 1]], [[0.3, 0.1], [0.2, 0.6]], [0.25, 0.5])
    0.25
    """
    labels = np.asarray(labels, bool)
    probabilities = np.asarray(probabilities)

    def score(threshold):
        predicted = probabilities >= threshold
        return f1_from_counts(int(np.sum(labels & predicted)), int(predicted.sum()),
                              int(labels.sum()))

    return max(sorted(candidates), key=lambda t: (score(t), -abs(t - 0.5), -t))


def _scores(correct: int, predicted: int, actual: int) -> dict[str, float | int]:
    return {"precision": correct / predicted if predicted else 0.0,
            "recall": correct / actual if actual else 0.0,
            "f1": f1_from_counts(correct, predicted, actual), "support": actual}


def f1_from_counts(correct: int, predicted: int, actual: int) -> float:
    """F1 from counts: `correct` of `predicted` items are right, of `actual` gold items.

    Args:
        correct: int. Items both predicted and gold.
        predicted: int. Items predicted.
        actual: int. Gold items.

    Returns:
        The harmonic mean of precision and recall; 0.0 when nothing is correct.
    """
    if correct == 0:
        return 0.0
    precision = correct / predicted
    recall = correct / actual
    return float(2 * precision * recall / (precision + recall))


def _same_length(labels, predictions):
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if labels.shape != predictions.shape:
        raise ValueError(
            f"labels have shape {labels.shape} but predictions {predictions.shape}; "
            "pass one prediction per label."
        )
    return labels, predictions


def _average_ranks(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=np.float64)
    sorted_values = values[order]
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks
