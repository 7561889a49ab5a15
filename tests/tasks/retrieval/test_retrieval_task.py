"""--task=retrieval through the generic loop: train (separate towers, hard negatives), evaluate, export."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from kbert.export.saved_model import export_saved_model
from kbert.tasks import RetrievalConfig
from kbert.tasks import RetrievalTask
from kbert.tasks import TaskData
from kbert.training.finetuning import run_finetuning
from tests.retrieval_testlib import make_pretrained
from tests.retrieval_testlib import write_beir


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("retrieval")
    beir = write_beir(str(root / "beir"))
    pretrained = make_pretrained(str(root / "pretrained"))
    model_dir = str(root / "run")
    results = run_finetuning("retrieval", pretrained, model_dir, data_dir=beir, train_batch_size=8,
                             num_train_epochs=2, learning_rate=1e-3, max_seq_length=32, verbose=0,
                             task_options=RetrievalConfig(shared_towers=False, hard_negatives=1))
    return beir, pretrained, model_dir, results


def test_training_lowers_the_loss_and_evaluates_over_the_corpus(trained):
    _, _, model_dir, results = trained
    assert results["train_loss"][1] < results["train_loss"][0]
    assert results["num_queries"] == 12
    for name in ("recall@1", "recall@10", "recall@100", "mrr@10", "ndcg@10"):
        assert 0.0 <= results[name] <= 1.0
    assert results["recall@100"] == 1.0  # 40 documents: every one is ranked
    run = open(os.path.join(model_dir, "eval_run.trec")).read().splitlines()
    assert len(run) == 12 * 40 and run[0].split()[1] == "Q0"
    saved = json.load(open(os.path.join(model_dir, "eval_results.json")))
    assert saved["mrr@10"] == pytest.approx(results["mrr@10"])


def test_separate_towers_export_query_and_document_signatures(trained, tmp_path):
    _, _, model_dir, _ = trained
    path = export_saved_model(model_dir, str(tmp_path / "export"), check=False)
    loaded = tf.saved_model.load(path)
    assert {"serving_default", "serve_ids", "query", "document"} <= set(loaded.signatures)
    text = tf.constant(["Emma Woodhouse, handsome, clever, and rich"])
    query = loaded.signatures["query"](text=text)["embedding"].numpy()
    document = loaded.signatures["document"](text=text)["embedding"].numpy()
    np.testing.assert_allclose(loaded.signatures["serving_default"](text=text)["embedding"], query)
    assert np.abs(query - document).max() > 1e-4  # two towers trained apart
    np.testing.assert_allclose(np.linalg.norm(query), 1.0, rtol=1e-5)


def test_zero_shot_evaluation_of_a_pretrained_directory(trained, tmp_path):
    beir, pretrained, _, _ = trained
    results = run_finetuning("retrieval", pretrained, str(tmp_path / "zero"), data_dir=beir, do_train=False,
                             max_seq_length=32, verbose=0)
    assert "train_loss" not in results and results["num_queries"] == 12


def test_hard_negatives_never_include_a_relevant_document(trained):
    beir, _, _, _ = trained
    task = RetrievalTask(RetrievalConfig(hard_negatives=3, negative_depth=5))
    examples = task.read(TaskData(data_dir=beir), "train")
    rows = task.training_rows(examples, None)
    assert len(rows) == 28 and all(len(row.negatives) == 3 for row in rows)
    assert all(row.document not in row.negatives for row in rows)


def test_missing_qrels_split_names_the_file(trained, tmp_path):
    beir, _, _, _ = trained
    with pytest.raises(FileNotFoundError, match=r"qrels/test\.tsv is missing"):
        RetrievalTask().read(TaskData(data_dir=beir), "test")
