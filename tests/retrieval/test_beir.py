"""BEIR and TREC files, good and bad."""

import pytest

from kbert.retrieval import beir


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
