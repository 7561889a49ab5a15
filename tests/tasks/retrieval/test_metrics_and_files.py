"""Ranking metrics against hand-worked examples; BEIR and TREC files, good and bad."""

import math

import pytest

from kbert.tasks.retrieval import beir
from kbert.tasks.retrieval.bm25 import BM25
from kbert.tasks.retrieval.metrics import evaluate_run
from kbert.tasks.retrieval.metrics import ndcg_at_k
from kbert.tasks.retrieval.metrics import recall_at_k
from kbert.tasks.retrieval.metrics import reciprocal_rank


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


def test_run_file_round_trip_orders_by_score(tmp_path):
    text = beir.format_run({"q1": [("d3", 0.9), ("d1", 0.5)], "q2": [("d2", 1.0)]}, tag="t")
    assert text.splitlines()[0] == "q1 Q0 d3 1 0.900000 t"
    path = tmp_path / "run.trec"
    path.write_text("q1 Q0 d1 1 0.5 t\nq1 Q0 d3 2 0.9 t\n")  # ranks disagree with scores
    assert beir.read_run(str(path)) == {"q1": [("d3", 0.9), ("d1", 0.5)]}


def test_qrels_beir_and_trec(tmp_path):
    (tmp_path / "a.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\n")
    (tmp_path / "b.txt").write_text("q1 0 d1 2\n")
    assert beir.read_qrels(str(tmp_path / "a.tsv")) == {"q1": {"d1": 1, "d2": 0}}
    assert beir.read_qrels(str(tmp_path / "b.txt")) == {"q1": {"d1": 2}}
    (tmp_path / "c.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\n")
    with pytest.raises(ValueError, match=r"c\.tsv:2: 2 columns"):
        beir.read_qrels(str(tmp_path / "c.tsv"))


@pytest.mark.parametrize("line, message", [
    ('{"text": "no id"}', r"corpus\.jsonl:2: no '_id' field"),
    ('{"_id": "d2"}', r"corpus\.jsonl:2: no 'text' field"),
    ('{"_id": "d1", "text": "again"}', r"corpus\.jsonl:2: duplicate document id 'd1' \(first at .*corpus\.jsonl:1\)"),
    ("not json", r"corpus\.jsonl:2: not a JSON object"),
])
def test_bad_corpus_lines_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": "d1", "title": "T", "text": "first"}\n' + line + "\n")
    with pytest.raises(ValueError, match=message):
        beir.read_corpus(str(path))


def test_corpus_contents_join_title_and_text(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": 7, "title": "Emma", "text": "A novel."}\n\n{"_id": "b", "text": "x"}\n')
    documents = beir.read_corpus(str(path))
    assert [(d.doc_id, d.contents) for d in documents] == [("7", "Emma A novel."), ("b", "x")]


def test_bm25_ranks_the_matching_document_first():
    bm25 = BM25(["the cat sat on the mat", "a dog barked at the postman", "cats and dogs"])
    assert bm25.search("dog postman", k=1)[0][0] == 1
    assert [i for i, _ in bm25.search("zebra", k=3)] == [0, 1, 2]  # no match: ties, index order
