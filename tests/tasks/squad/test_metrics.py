"""The official SQuAD evaluation against hand-worked examples."""

import pytest

from kbert.tasks.squad import metrics as squad_metrics


def test_squad_normalization():
    assert squad_metrics.normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert squad_metrics.normalize_answer("an apple a day, the end.") == "apple day end"
    assert squad_metrics.normalize_answer("Theatre (1870)") == "theatre 1870"  # "the" only as a word


def test_squad_exact_match_and_f1():
    assert squad_metrics.squad_exact_match(["the cat"], "Cat.") == 1.0
    assert squad_metrics.squad_exact_match(["dog", "the cat"], "a cat") == 1.0
    # gold [big, red, dog], predicted [red, dog, barked]: overlap 2 -> P = R = 2/3.
    assert squad_metrics.squad_f1(["the big red dog"], "red dog barked") == pytest.approx(2 / 3)
    assert squad_metrics.squad_f1(["x y", "red dog"], "red dog barked") == pytest.approx(0.8)


def test_squad_no_answer_edge_cases():
    assert squad_metrics.squad_exact_match([], "") == 1.0
    assert squad_metrics.squad_f1([], "") == 1.0
    assert squad_metrics.squad_f1([], "something") == 0.0
    assert squad_metrics.squad_f1(["paris"], "") == 0.0


def test_squad_metrics_counts_missing_predictions_as_zero():
    gold = {"q1": ["the cat"], "q2": ["1870 to 1939"]}
    result = squad_metrics.squad_metrics(gold, {"q1": "Cat"})
    assert result == {"exact_match": 50.0, "f1": 50.0, "total": 2}
