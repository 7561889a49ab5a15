"""Entity F1 (conlleval semantics) against hand-worked examples."""

import pytest

from kbert.tasks.token_classification import metrics as ner_metrics


def test_entity_spans_iob2_and_iob1():
    assert ner_metrics.entity_spans(["B-PER", "I-PER", "O", "B-LOC", "B-LOC"]) == {
        ("PER", 0, 1), ("LOC", 3, 3), ("LOC", 4, 4)}
    # IOB1 (original eng.train): I- starts an entity; B- only splits same-type neighbours.
    assert ner_metrics.entity_spans(["I-PER", "I-PER", "I-LOC", "B-LOC", "O"]) == {
        ("PER", 0, 1), ("LOC", 2, 2), ("LOC", 3, 3)}
    # An I- of another type after B- starts a new entity, as conlleval.
    assert ner_metrics.entity_spans(["B-ORG", "I-MISC", "O", "I-ORG"]) == {
        ("ORG", 0, 0), ("MISC", 1, 1), ("ORG", 3, 3)}


def test_entity_f1_exact_span_match():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "O", "O", "B-LOC"], ["O", "O"]]
    # gold: PER(0,1) LOC(3,3) ORG(0,0); predicted: PER(0,0) LOC(3,3); correct: LOC.
    result = ner_metrics.entity_f1(gold, predicted)
    assert result["precision"] == pytest.approx(1 / 2)
    assert result["recall"] == pytest.approx(1 / 3)
    assert result["f1"] == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))


def test_entity_f1_with_no_predicted_entities_is_zero():
    assert ner_metrics.entity_f1([["B-PER", "O"]], [["O", "O"]]) == {
        "precision": 0.0, "recall": 0.0, "f1": 0.0}
    with pytest.raises(ValueError, match="sentence 0: 2 gold tags but 1 predicted"):
        ner_metrics.entity_f1([["B-PER", "O"]], [["O"]])
