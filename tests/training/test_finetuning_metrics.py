"""Fine-tuning metrics against hand-computed values, including the known edge cases."""

import numpy as np
import pytest

from kbert.training import metrics


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


def test_entity_spans_iob2_and_iob1():
    assert metrics.entity_spans(["B-PER", "I-PER", "O", "B-LOC", "B-LOC"]) == {
        ("PER", 0, 1), ("LOC", 3, 3), ("LOC", 4, 4)}
    # IOB1 (original eng.train): I- starts an entity; B- only splits same-type neighbours.
    assert metrics.entity_spans(["I-PER", "I-PER", "I-LOC", "B-LOC", "O"]) == {
        ("PER", 0, 1), ("LOC", 2, 2), ("LOC", 3, 3)}
    # An I- of another type after B- starts a new entity, as conlleval.
    assert metrics.entity_spans(["B-ORG", "I-MISC", "O", "I-ORG"]) == {
        ("ORG", 0, 0), ("MISC", 1, 1), ("ORG", 3, 3)}


def test_entity_f1_exact_span_match():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "O", "O", "B-LOC"], ["O", "O"]]
    # gold: PER(0,1) LOC(3,3) ORG(0,0); predicted: PER(0,0) LOC(3,3); correct: LOC.
    result = metrics.entity_f1(gold, predicted)
    assert result["precision"] == pytest.approx(1 / 2)
    assert result["recall"] == pytest.approx(1 / 3)
    assert result["f1"] == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))


def test_entity_f1_with_no_predicted_entities_is_zero():
    assert metrics.entity_f1([["B-PER", "O"]], [["O", "O"]]) == {
        "precision": 0.0, "recall": 0.0, "f1": 0.0}
    with pytest.raises(ValueError, match="sentence 0: 2 gold tags but 1 predicted"):
        metrics.entity_f1([["B-PER", "O"]], [["O"]])


def test_squad_normalization():
    assert metrics.normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert metrics.normalize_answer("an apple a day, the end.") == "apple day end"
    assert metrics.normalize_answer("Theatre (1870)") == "theatre 1870"  # "the" only as a word


def test_squad_exact_match_and_f1():
    assert metrics.squad_exact_match(["the cat"], "Cat.") == 1.0
    assert metrics.squad_exact_match(["dog", "the cat"], "a cat") == 1.0
    # gold [big, red, dog], predicted [red, dog, barked]: overlap 2 -> P = R = 2/3.
    assert metrics.squad_f1(["the big red dog"], "red dog barked") == pytest.approx(2 / 3)
    assert metrics.squad_f1(["x y", "red dog"], "red dog barked") == pytest.approx(0.8)


def test_squad_no_answer_edge_cases():
    assert metrics.squad_exact_match([], "") == 1.0
    assert metrics.squad_f1([], "") == 1.0
    assert metrics.squad_f1([], "something") == 0.0
    assert metrics.squad_f1(["paris"], "") == 0.0


def test_squad_metrics_counts_missing_predictions_as_zero():
    gold = {"q1": ["the cat"], "q2": ["1870 to 1939"]}
    result = metrics.squad_metrics(gold, {"q1": "Cat"})
    assert result == {"exact_match": 50.0, "f1": 50.0, "total": 2}
