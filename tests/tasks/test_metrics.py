"""Classification and regression metrics against hand-worked examples."""

import numpy as np
import pytest

from kbert.tasks import metrics


def test_accuracy():
    assert metrics.accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5
    assert metrics.accuracy([], []) == 0.0


def test_f1_binary():
    # tp=2, predicted positive=3, actual positive=3 -> P=R=2/3.
    assert metrics.f1_score([1, 1, 0, 0, 1], [1, 0, 1, 0, 1]) == pytest.approx(2 / 3)
    # tp=1, predicted=1, actual=3 -> P=1, R=1/3, F1=0.5.
    assert metrics.f1_score([1, 1, 1, 0], [1, 0, 0, 0]) == pytest.approx(0.5)
    assert metrics.f1_score([1, 1, 0], [0, 0, 0]) == 0.0  # no positive predicted


def test_f1_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match=r"\(3,\) but predictions \(2,\)"):
        metrics.f1_score([1, 0, 1], [1, 0])


def test_matthews_corrcoef():
    # tp=1 tn=2 fp=0 fn=1: (1*2 - 0*1) / sqrt(1 * 2 * 2 * 3).
    assert metrics.matthews_corrcoef([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(2 / np.sqrt(12))
    assert metrics.matthews_corrcoef([1, 0, 1, 0], [1, 0, 1, 0]) == 1.0
    assert metrics.matthews_corrcoef([1, 0, 1, 0], [0, 1, 0, 1]) == -1.0


def test_matthews_corrcoef_with_one_class_is_zero():
    assert metrics.matthews_corrcoef([1, 0, 1, 0], [1, 1, 1, 1]) == 0.0  # one class predicted
    assert metrics.matthews_corrcoef([1, 1, 1], [1, 0, 1]) == 0.0  # one class in the gold


def test_pearson_and_spearman():
    # x - mean = [-1, 0, 1], y - mean = [-7/3, -1/3, 8/3]: 5 / sqrt(2 * 114/9).
    assert metrics.pearson_corrcoef([1, 2, 3], [2, 4, 7]) == pytest.approx(5 / np.sqrt(228 / 9))
    assert metrics.spearman_corrcoef([1, 2, 3], [2, 4, 7]) == pytest.approx(1.0)
    # Ties get average ranks: [1, 2.5, 2.5, 4] vs [1, 2, 3, 4] -> 4.5 / sqrt(4.5 * 5).
    assert metrics.spearman_corrcoef([1, 2, 2, 3], [10, 20, 30, 40]) == pytest.approx(
        4.5 / np.sqrt(22.5))
    assert metrics.pearson_corrcoef([1, 1, 1], [1, 2, 3]) == 0.0  # constant: undefined
