"""kbert.index: build -> search round trips (exact and faiss), adding, --exact, and bad inputs.

One tiny pre-trained encoder and one corpus of real sentences are shared by the
module, and so is one index of that corpus per backend (exact, the default, and
faiss): tests that start from one get their own copy (building one takes a few
seconds); the others build their own.
"""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from kbert.index import IndexSearcher
from kbert.index import build_index
from kbert.index import read_index_metadata
from kbert.index.metadata import index_versions
from tests.retrieval_testlib import make_pretrained
from tests.retrieval_testlib import sentences


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    root = tmp_path_factory.mktemp("index")
    texts = sentences(40)
    corpus = str(root / "corpus.jsonl")
    more = str(root / "more.jsonl")
    with open(corpus, "w") as f:
        f.writelines(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts[:30]))
    with open(more, "w") as f:
        f.writelines(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts[30:], 30))
    return {"root": root, "texts": texts, "corpus": corpus, "more": more,
            "model": make_pretrained(str(root / "pretrained")),
            "other": make_pretrained(str(root / "other"), seed=4, hidden_dim=16)}


def _build(shared, tmp_path, **kwargs):
    kwargs.setdefault("model_dir", shared["model"])
    return build_index([kwargs.pop("corpus", shared["corpus"])], str(tmp_path / "idx"), check=False,
                       **kwargs)


@pytest.fixture(scope="module")
def default_index(shared, tmp_path_factory):
    """backend -> `_build(shared, ..., backend=backend)`'s directory and summary, built once
    each, when first asked for."""
    built = {}

    def get(backend):
        if backend not in built:
            root = tmp_path_factory.mktemp(f"default_index_{backend}")
            built[backend] = str(root / "idx"), _build(shared, root, backend=backend)
        return built[backend]

    return get


def _index(shared, default_index, tmp_path, backend="exact"):
    """`tmp_path/idx` as `_build(shared, tmp_path, backend=backend)` leaves it, and its summary:
    a copy of the module's build (the same call)."""
    directory, summary = default_index(backend)
    shutil.copytree(directory, tmp_path / "idx")
    return summary


@pytest.mark.parametrize("backend", ["exact", "faiss"])
def test_every_document_is_top_1_for_its_own_text(shared, default_index, tmp_path, backend):
    summary = _index(shared, default_index, tmp_path, backend)
    assert (summary.added, summary.count) == (30, 30)
    metadata = read_index_metadata(str(tmp_path / "idx"))
    assert (metadata.backend, metadata.dimension, metadata.count, metadata.metric) == (backend, 32, 30, "cosine")
    assert metadata.model["pooling"] == "mean" and metadata.model["normalize"] is True
    results = IndexSearcher(str(tmp_path / "idx")).search(shared["texts"][:30], top_k=3)
    assert [ids[0] for ids in results.ids] == [f"d{i}" for i in range(30)]
    np.testing.assert_allclose([scores[0] for scores in results.scores], 1.0, atol=1e-5)
    assert results.texts[5][0] == shared["texts"][5]


def test_exact_signature_equals_numpy_search_and_k_is_capped(shared, tmp_path):
    _build(shared, tmp_path, serving_top_k=4)
    queries = ["Emma was unhappy", "the wedding of Miss Taylor"]
    graph = IndexSearcher(str(tmp_path / "idx")).search(queries, top_k=50)
    brute = IndexSearcher(str(tmp_path / "idx"), exact=True).search(queries, top_k=50)
    assert len(graph.ids[0]) == 30  # k capped at the number of documents
    assert graph.ids == brute.ids
    np.testing.assert_allclose(graph.scores, brute.scores, atol=1e-5)
    loaded = tf.saved_model.load(os.path.join(str(tmp_path / "idx"), "1"))
    served = loaded.signatures["search"](query=tf.constant(queries))
    assert served["ids"].shape == (2, 4)
    assert [i.decode() for i in served["ids"].numpy()[0]] == graph.ids[0][:4]
    with pytest.raises(tf.errors.InvalidArgumentError, match="same for every query"):
        loaded.signatures["search_top_k"](query=tf.constant(queries), top_k=tf.constant([3, 4]))


@pytest.mark.parametrize("backend", ["exact", "faiss"])
def test_add_then_search_finds_old_and_new_documents(shared, default_index, tmp_path, backend):
    _index(shared, default_index, tmp_path, backend)
    old_vectors = np.load(tmp_path / "idx" / "1" / "assets.extra" / "embeddings.npy")
    summary = build_index([shared["more"]], str(tmp_path / "idx"), add=True, check=False)
    assert (summary.added, summary.count) == (10, 40)
    assert index_versions(str(tmp_path / "idx")) == [1, 2]
    new_vectors = np.load(tmp_path / "idx" / "2" / "assets.extra" / "embeddings.npy")
    np.testing.assert_array_equal(new_vectors[:30], old_vectors)  # not embedded again
    results = IndexSearcher(str(tmp_path / "idx")).search([shared["texts"][3], shared["texts"][35]], 1)
    assert results.ids == [["d3"], ["d35"]]


def test_faiss_ivf_and_exact_flag(shared, tmp_path):
    _build(shared, tmp_path, backend="faiss", faiss_options={"faiss_type": "ivf", "nlist": 2, "nprobe": 2})
    metadata = read_index_metadata(str(tmp_path / "idx"))
    assert metadata.faiss == {"type": "ivf", "nlist": 2, "nprobe": 2}
    searcher = IndexSearcher(str(tmp_path / "idx"))
    exact = IndexSearcher(str(tmp_path / "idx"), exact=True)
    assert (searcher.tag, exact.tag) == ("kbert-faiss-ivf", "kbert-exact")
    assert searcher.search(shared["texts"][:5], 5).ids == exact.search(shared["texts"][:5], 5).ids


def _unchanged(tmp_path, versions):
    assert index_versions(str(tmp_path / "idx")) == versions
    assert sorted(os.listdir(tmp_path / "idx")) == [str(v) for v in versions]  # no staging left


def test_duplicate_id_in_an_added_corpus_is_refused(shared, default_index, tmp_path):
    _index(shared, default_index, tmp_path)
    added = tmp_path / "added.jsonl"
    added.write_text("".join(json.dumps({"_id": i, "text": "new text"}) + "\n" for i in ["n1", "n2", "n3", "d3"]))
    with pytest.raises(ValueError, match=r"added\.jsonl:4: duplicate document id 'd3' \(first at the index\)"):
        build_index([str(added)], str(tmp_path / "idx"), add=True, check=False)
    _unchanged(tmp_path, [1])


def test_duplicate_id_within_a_corpus_is_refused(shared, tmp_path):
    twice = tmp_path / "twice.jsonl"
    twice.write_text('{"_id": "a", "text": "one"}\n{"_id": "b", "text": "two"}\n{"_id": "a", "text": "three"}\n')
    with pytest.raises(ValueError, match=r"twice\.jsonl:3: duplicate document id 'a' \(first at .*twice\.jsonl:1\)"):
        _build(shared, tmp_path, corpus=str(twice))
    assert not os.path.exists(tmp_path / "idx") or not os.listdir(tmp_path / "idx")


def test_model_of_another_dimension_is_refused(shared, default_index, tmp_path):
    _index(shared, default_index, tmp_path)
    with pytest.raises(ValueError, match=r"holds 32-dimensional vectors .* gives 16-dimensional"):
        build_index([shared["more"]], str(tmp_path / "idx"), model_dir=shared["other"], add=True, check=False)
    _unchanged(tmp_path, [1])


def test_building_over_an_index_needs_add_or_overwrite(shared, default_index, tmp_path):
    _index(shared, default_index, tmp_path)
    with pytest.raises(ValueError, match="already holds an index .* pass --add"):
        _build(shared, tmp_path, corpus=shared["more"])
    _unchanged(tmp_path, [1])


def test_corpus_line_without_text_names_file_and_line(shared, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"_id": "a", "text": "fine"}\n{"_id": "b", "body": "no text"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: no 'text' field"):
        _build(shared, tmp_path, corpus=str(bad))
    assert not os.path.exists(tmp_path / "idx") or not os.listdir(tmp_path / "idx")


def test_empty_query_list_and_missing_index(shared, default_index, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"--index_dir=.*missing does not exist .* kbert-index build"):
        IndexSearcher(str(tmp_path / "missing"))
    _index(shared, default_index, tmp_path)
    searcher = IndexSearcher(str(tmp_path / "idx"))
    with pytest.raises(ValueError, match="no queries"):
        searcher.search([], 10)
    with pytest.raises(ValueError, match="top_k=0"):
        searcher.search(["a"], 0)
