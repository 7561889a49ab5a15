"""Ranking metrics against hand-worked examples."""

import math

import pytest

from kbert.retrieval.metrics import evaluate_run
from kbert.retrieval.metrics import ndcg_at_k
from kbert.retrieval.metrics import recall_at_k
from kbert.retrieval.metrics import reciprocal_rank


def test_recall_mrr_ndcg_hand_worked():
    ranked = ["d3", "d1", "d7", "d2"]
    judged = {"d1": 1, "d2": 2, "d9": 1}
    assert recall_at_k(ranked, judged, 1) == 0.0
    assert recall_at_k(ranked, judged, 2) == pytest.approx(1 / 3)
    assert recall_at_k(ranked, judged, 10) == pytest.approx(2 / 3)
    assert reciprocal_rank(ranked, judged) == 0.5
    assert reciprocal_rank(ranked, judged, k=1) == 0.0
    # DCG = 1/log2(3) + 2/log2(5); ideal = 2/log2(2) + 1/log2(3) + 1/log2(4).
    dcg = 1 / math.log2(3) + 2 / math.log2(5)
    ideal = 2 + 1 / math.log2(3) + 0.5
    assert ndcg_at_k(ranked, judged) == pytest.approx(dcg / ideal)


def test_evaluate_run_averages_judged_queries_and_counts_missing_as_zero():
    run = {"q1": [("d1", 3.0), ("d2", 2.0)], "q2": [("d5", 1.0)]}
    qrels = {"q1": {"d2": 1}, "q2": {"d5": 1}, "q3": {"d1": 1}, "q4": {"d1": 0}}
    results = evaluate_run(run, qrels, recall_ks=(1, 2))
    assert results["num_queries"] == 3  # q4 has no relevant document
    assert results["recall@1"] == pytest.approx(1 / 3)
    assert results["recall@2"] == pytest.approx(2 / 3)
    assert results["mrr@10"] == pytest.approx((0.5 + 1.0 + 0.0) / 3)
