"""--task=rerank: the listwise loss against numpy, training and evaluation, the query/document signature."""

import numpy as np
import pytest
import tensorflow as tf

from kbert.export.saved_model import export_saved_model
from kbert.tasks import RerankConfig
from kbert.tasks.rerank.losses import ListwiseSoftmaxLoss
from kbert.training.finetuning import run_finetuning
from tests.retrieval_testlib import make_pretrained
from tests.retrieval_testlib import write_beir


def test_listwise_loss_equals_numpy_softmax_cross_entropy():
    scores = np.array([[2.0], [1.0], [0.5], [-1.0], [0.0], [3.0]], "float32")  # two groups of three
    groups = scores.reshape(2, 3).astype("float64")
    expected = np.mean([np.log(np.exp(g).sum()) - g[0] for g in groups])
    loss = ListwiseSoftmaxLoss(group_size=3)(np.zeros((6, 1), "float32"), scores)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-6)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("rerank")
    beir = write_beir(str(root / "beir"))
    pretrained = make_pretrained(str(root / "pretrained"))
    model_dir = str(root / "run")
    results = run_finetuning("rerank", pretrained, model_dir, data_dir=beir, train_batch_size=4,
                             num_train_epochs=2, learning_rate=1e-3, max_seq_length=48, verbose=0,
                             task_options=RerankConfig(negatives=2, rerank_top_k=10))
    return model_dir, results


def test_training_lowers_the_loss_and_reports_before_and_after(trained):
    _, results = trained
    assert results["train_loss"][1] < results["train_loss"][0]
    for name in ("mrr@10", "ndcg@10", "mrr@10_first_stage", "ndcg@10_first_stage", "mrr@10_rrf",
                 "recall@1_interpolate"):
        assert 0.0 <= results[name] <= 1.0
    assert results["rerank_top_k"] == 10 and results["num_queries"] == 12 and results["fusion"] == "none"


def test_export_scores_query_document_pairs_as_the_model(trained, tmp_path):
    model_dir, _ = trained
    loaded = tf.saved_model.load(export_saved_model(model_dir, str(tmp_path / "export"), check=False))
    function = loaded.signatures["serving_default"]
    assert set(function.structured_input_signature[1]) == {"query", "document"}
    queries = tf.constant(["who was emma", "who was emma"])
    documents = tf.constant(["Emma Woodhouse, handsome, clever, and rich.", "It was a wet day."])
    scores = function(query=queries, document=documents)["score"].numpy()
    assert scores.shape == (2,) and scores[0] != scores[1]
    from kbert.index.encoders import load_reranker

    np.testing.assert_allclose(load_reranker(model_dir)(["who was emma"] * 2, [d.decode() for d in
                                                        documents.numpy()]), scores, rtol=1e-5)


def test_index_search_reranks_the_top_hits_by_the_cross_encoder(trained, tmp_path, monkeypatch):
    import functools
    import json

    from kbert.index import IndexSearcher
    from kbert.index import build_index
    from kbert.index import searcher as searcher_module
    from kbert.index.encoders import load_reranker
    from tests.retrieval_testlib import sentences

    model_dir, _ = trained
    # The searchers below and the test's own scorer load one cross-encoder: loaded (and
    # its scoring function traced) once, not four times.
    load_reranker = functools.cache(load_reranker)
    monkeypatch.setattr(searcher_module, "load_reranker", load_reranker)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(sentences(12))))
    build_index([str(corpus)], str(tmp_path / "idx"), model_dir=make_pretrained(str(tmp_path / "pre")), check=False)
    queries = ["Emma Woodhouse, handsome, clever", "the loss of her governess"]
    first = IndexSearcher(str(tmp_path / "idx")).search(queries, top_k=8)
    searcher = IndexSearcher(str(tmp_path / "idx"), rerank_model_dir=model_dir, rerank_top_k=5)
    assert searcher.tag == "kbert-exact+rerank"
    reranked = searcher.search(queries, top_k=8)
    score = load_reranker(model_dir)
    for query, before, ids, scores, texts in zip(queries, first.ids, reranked.ids, reranked.scores, reranked.texts):
        assert sorted(ids[:5]) == sorted(before[:5]) and ids[5:] == before[5:]  # only the head moves
        np.testing.assert_allclose(scores[:5], score([query] * 5, texts[:5]), rtol=1e-5)
        assert scores == sorted(scores, reverse=True)  # a TREC run keeps this order
    # The same pairs, scored in one call as the searcher does, give the fused orders by hand.
    cross = score([q for q in queries for _ in range(5)], [t for texts in first.texts for t in texts[:5]])
    for fusion in ("rrf", "interpolate"):
        searcher = IndexSearcher(str(tmp_path / "idx"), rerank_model_dir=model_dir, rerank_top_k=5,
                                 rerank_fusion=fusion, rerank_fusion_weight=0.7)
        assert searcher.tag == f"kbert-exact+rerank-{fusion}"
        fused = searcher.search(queries, top_k=8)
        for n, (before, before_scores, ids, scores) in enumerate(zip(first.ids, first.scores, fused.ids,
                                                                     fused.scores)):
            head = cross[5 * n:5 * n + 5].astype(np.float64)
            if fusion == "rrf":  # 1 / (60 + first-stage rank) + 1 / (60 + cross-encoder rank)
                cross_rank = {doc: r for r, doc in enumerate(np.asarray(before[:5])[np.argsort(-head)], 1)}
                want = {doc: 1 / (60 + r) + 1 / (60 + cross_rank[doc]) for r, doc in enumerate(before[:5], 1)}
            else:  # 0.3 z(first-stage score) + 0.7 z(cross-encoder score)
                first_z = (np.array(before_scores[:5]) - np.mean(before_scores[:5])) / np.std(before_scores[:5])
                want = dict(zip(before[:5], 0.3 * first_z + 0.7 * (head - head.mean()) / head.std()))
            np.testing.assert_allclose(scores[:5], [want[doc] for doc in ids[:5]], rtol=1e-6)
            assert scores[:5] == sorted(scores[:5], reverse=True) and ids[5:] == before[5:]


def test_bad_fusion_is_refused_before_loading(tmp_path):
    from kbert.index import IndexSearcher

    with pytest.raises(ValueError, match="--rerank_fusion='mean'"):
        IndexSearcher(str(tmp_path / "missing"), rerank_fusion="mean")
    with pytest.raises(ValueError, match="RerankConfig|--rerank_fusion"):
        from kbert.tasks.rerank.task import RerankTask
        RerankTask(RerankConfig(fusion="sum"))
