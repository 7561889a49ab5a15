"""kbert-index as a user runs it: evaluate a TREC run against qrels; a bad corpus is one error line.

(The build and search commands' library paths are tested in tests/index; the
served search against `kbert-index search` in tests/serving/test_index_serving.py.)
"""

import json
import os

import pytest

from tests import forked_python
from tests.conftest import REPO
from tests.retrieval_testlib import make_pretrained


def _index(*flags):
    env = {**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return forked_python.run(["-m", "kbert.bin.index", *flags], cwd=REPO, env=env, timeout=300)


def test_evaluate_prints_recall_mrr_ndcg_of_a_trec_run(tmp_path):
    # q1: its document at rank 1; q2: at rank 2; q3 judged but absent from the run (counts 0).
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 9.0 t\nq1 Q0 d2 2 8.0 t\n"
                                       "q2 Q0 d1 1 7.0 t\nq2 Q0 d3 2 6.0 t\n")
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\nq3\td2\t1\n")
    result = _index("evaluate", f"--run={tmp_path / 'run.trec'}", f"--qrels={tmp_path / 'qrels.tsv'}")
    assert result.returncode == 0, result.stderr[-2000:]
    values = json.loads(result.stdout.strip().splitlines()[-1])
    assert values["num_queries"] == 3
    assert values["recall@1"] == pytest.approx(1 / 3) and values["recall@10"] == pytest.approx(2 / 3)
    assert values["mrr@10"] == pytest.approx((1 + 1 / 2) / 3)
    assert values["ndcg@10"] == pytest.approx((1 + 1 / 1.584962500721156) / 3)
    assert "mrr@10\t0.5000" in result.stdout


def test_build_with_a_corpus_line_without_id_is_one_error_line(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "a", "text": "fine"}\n{"text": "no id"}\n')
    model = make_pretrained(str(tmp_path / "pretrained"))
    result = _index("build", f"--model_dir={model}", f"--corpus={corpus}", f"--index_dir={tmp_path / 'idx'}",
                    "--skip_ops_check")
    assert result.returncode == 2
    assert "corpus.jsonl:2: no '_id' field" in result.stderr.strip().splitlines()[-1]
    assert not os.path.exists(tmp_path / "idx") or not os.listdir(tmp_path / "idx")
