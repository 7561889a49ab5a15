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


# Three classes a, b, c; seven examples worked by hand below.
GOLD = [0, 0, 1, 1, 2, 2, 2]
PREDICTED = [0, 1, 1, 1, 2, 0, 2]


def test_class_scores_macro_f1_and_confusion_matrix_by_hand():
    # a: tp 1 of 2 predicted, 2 gold -> P=R=F1=0.5. b: tp 2 of 3 predicted, 2 gold ->
    # P=2/3, R=1, F1=0.8. c: tp 2 of 2 predicted, 3 gold -> P=1, R=2/3, F1=0.8.
    scores = metrics.class_scores(GOLD, PREDICTED, ["a", "b", "c"])
    assert scores["a"] == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2}
    assert scores["b"] == pytest.approx({"precision": 2 / 3, "recall": 1.0, "f1": 0.8,
                                         "support": 2})
    assert scores["c"] == pytest.approx({"precision": 1.0, "recall": 2 / 3, "f1": 0.8,
                                         "support": 3})
    assert metrics.macro_f1(GOLD, PREDICTED) == pytest.approx(0.7)
    assert metrics.accuracy(GOLD, PREDICTED) == pytest.approx(5 / 7)
    assert metrics.confusion_matrix(GOLD, PREDICTED, ["a", "b", "c"]) == {
        "labels": ["a", "b", "c"], "matrix": [[1, 1, 0], [0, 2, 0], [1, 0, 2]]}
    # A class neither gold nor predicted does not count in the macro mean (scikit-learn's
    # default); one predicted but never gold counts with F1 0. b is absent: (2/3 + 0) / 2.
    assert metrics.macro_f1([0, 0], [0, 2]) == pytest.approx(1 / 3)
    assert metrics.class_scores([0, 0], [0, 2], ["a", "b", "c"])["b"] == {
        "precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}


def test_multi_label_scores_by_hand():
    gold = [[1, 0, 1], [0, 1, 0], [1, 1, 0]]
    predicted = [[1, 0, 0], [0, 1, 1], [1, 1, 0]]
    scores = metrics.multi_label_scores(gold, predicted, ["x", "y", "z"])
    # Decisions: tp 4 (x twice, y twice), 5 predicted, 5 gold -> micro F1 0.8; per class
    # x 1.0, y 1.0, z 0.0 (its one prediction is wrong, its one gold missed) -> macro 2/3;
    # only the third example's whole set is right -> subset accuracy 1/3.
    assert scores["micro_f1"] == pytest.approx(0.8)
    assert scores["macro_f1"] == pytest.approx(2 / 3)
    assert scores["subset_accuracy"] == pytest.approx(1 / 3)
    assert scores["per_class"]["z"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert scores["per_class"]["x"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 2}


def test_the_threshold_is_the_best_micro_f1_and_ties_go_nearest_one_half():
    gold = [[1, 0], [1, 1], [0, 0]]
    probabilities = [[0.9, 0.3], [0.4, 0.35], [0.2, 0.1]]
    # 0.30: 4 predicted, 3 right of 3 -> 6/7; 0.35: 3 predicted, all right -> 1.0;
    # 0.40: the 0.35 is lost -> 2 of 3 -> 0.8.
    assert metrics.choose_threshold(gold, probabilities) == 0.35
    # Every threshold up to 0.7 predicts the one label right: the tie goes to 0.5.
    assert metrics.choose_threshold([[1]], [[0.7]]) == 0.5
    assert metrics.choose_threshold([[1]], [[0.3]]) == 0.3


def test_mean_squared_error():
    assert metrics.mean_squared_error([1.0, 2.0, 3.0], [1.0, 3.0, 5.0]) == pytest.approx(5 / 3)
