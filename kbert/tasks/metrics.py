"""Classification and regression metrics with the official semantics, in plain numpy.

Each function takes gold values first, then predictions, like scikit-learn.
They are hand-written (rather than pulling scikit-learn and scipy into the
install) because each is a few lines and the semantics must match the
reference scripts exactly:

- `accuracy`, `f1_score` (binary, positive class 1), `matthews_corrcoef`:
  as scikit-learn computes them (GLUE's scorer uses scikit-learn).
- `pearson_corrcoef`, `spearman_corrcoef`: as scipy computes them (average
  ranks for ties).

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
