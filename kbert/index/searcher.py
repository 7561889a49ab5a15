"""Searching an index: query text in, the top documents out, optionally re-ranked.

`IndexSearcher` is what `kbert-index search` and the search endpoint of
`kbert-serve --index_dir` both run, so a served answer equals the CLI's.
The exact back-end runs the version's own `search_top_k` signature (the graph
TF Serving serves); the faiss back-end embeds with the version's `embed`
signature and asks faiss; `exact=True` embeds the same way and scores every
stored vector with numpy (to measure the approximate index's recall). With a
cross-encoder, the first `rerank_top_k` hits are re-scored by it and sorted,
by its score alone or fused with the first stage's (`rerank_fusion`).
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import tensorflow as tf

from kbert.index import ann
from kbert.index.builder import read_documents
from kbert.index.encoders import load_reranker
from kbert.index.metadata import EMBEDDINGS
from kbert.index.metadata import FAISS_FILE
from kbert.index.metadata import extra_path
from kbert.index.metadata import locate_index
from kbert.index.metadata import read_index_metadata
from kbert.retrieval.embedding import unit_rows
from kbert.retrieval.fusion import DEFAULT_WEIGHT
from kbert.retrieval.fusion import check_fusion
from kbert.retrieval.fusion import fuse_scores
from kbert.retrieval.top_k import top_k_inner_product

log = logging.getLogger("kbert.index")


@dataclasses.dataclass
class SearchResults:
    """Per query, the hits best first: `ids`, `scores` and `texts`, lists of equal-length lists."""

    ids: list[list[str]]
    scores: list[list[float]]
    texts: list[list[str]]

    def to_json(self) -> dict:
        return {"ids": self.ids, "scores": self.scores, "texts": self.texts}

    def run(self, query_ids: list[str]) -> dict[str, list[tuple[str, float]]]:
        """As a run: query id -> [(document id, score)] (for `format_run`)."""
        return {q: list(zip(ids, scores)) for q, ids, scores in zip(query_ids, self.ids, self.scores)}


class IndexSearcher:
    """An index opened for search (thread-safe: the REST endpoint shares one).

    Args:
        index_dir: str. An index directory (its latest version) or a version directory.
        exact: bool. Brute-force search whatever the back-end. Defaults to False.
        rerank_model_dir: str or None. A cross-encoder (fine-tuned `rerank`
            directory or its export) re-scoring the top hits.
        rerank_top_k: int. Hits re-scored per query. Defaults to 50.
        rerank_fusion: str. How the re-scored hits are ordered: `none` (by the
            cross-encoder alone), `rrf` or `interpolate` (fused with the first
            stage; `kbert.retrieval.fusion`). Defaults to `none`.
        rerank_fusion_weight: float. `interpolate`: the cross-encoder's share.
            Defaults to 0.5.

    Example:

    >>> searcher = IndexSearcher("indexes/docs", rerank_model_dir="runs/rerank")
    >>> searcher.search(["who wrote Emma?"], top_k=10).texts[0][0]
    """

    def __init__(self, index_dir: str, exact: bool = False, rerank_model_dir: str | None = None,
                 rerank_top_k: int = 50, rerank_fusion: str = "none",
                 rerank_fusion_weight: float = DEFAULT_WEIGHT):
        if rerank_top_k < 1:
            raise ValueError(f"--rerank_top_k={rerank_top_k}; it must be >= 1.")
        check_fusion(rerank_fusion, rerank_fusion_weight)
        self.rerank_fusion = rerank_fusion
        self.rerank_fusion_weight = rerank_fusion_weight
        self.version_dir = locate_index(index_dir)
        self.metadata = read_index_metadata(self.version_dir)
        self.exact = exact
        self.rerank_top_k = rerank_top_k
        self.loaded = tf.saved_model.load(self.version_dir)
        self.ids, self.texts = read_documents(self.version_dir)
        self._faiss = None
        self._embeddings = None
        if exact:
            self._embeddings = np.load(extra_path(self.version_dir, EMBEDDINGS))
        elif self.metadata.backend == "faiss":
            self._faiss = ann.read_faiss(extra_path(self.version_dir, FAISS_FILE), self.metadata.faiss)
        self.reranker = load_reranker(rerank_model_dir) if rerank_model_dir else None

    @property
    def tag(self) -> str:
        """A run tag naming how results were found (`kbert-exact`, `kbert-faiss-hnsw+rerank`, ...)."""
        name = "exact" if self.exact or self.metadata.backend == "exact" else \
            f"faiss-{self.metadata.faiss['type']}"
        fused = f"-{self.rerank_fusion}" if self.rerank_fusion != "none" else ""
        return f"kbert-{name}" + (f"+rerank{fused}" if self.reranker else "")

    def embed(self, queries: list[str]) -> np.ndarray:
        """Query vectors (unit rows) from the index's own encoder."""
        vectors = self.loaded.signatures["embed"](text=tf.constant(queries, tf.string))["embedding"]
        return unit_rows(vectors.numpy())

    def search(self, queries: list[str], top_k: int = 10) -> SearchResults:
        """The `top_k` best documents of each query (fewer when the index is smaller).

        Args:
            queries: list of str. At least one.
            top_k: int. Hits per query.

        Returns:
            `SearchResults`.

        Raises:
            ValueError: no queries, a query that is not a string, or `top_k` < 1.
        """
        if not queries:
            raise ValueError("no queries: send at least one query text.")
        bad = next((i for i, q in enumerate(queries) if not isinstance(q, str)), None)
        if bad is not None:
            raise ValueError(f"query {bad} is {type(queries[bad]).__name__}; queries are strings.")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"top_k={top_k!r}; it must be an integer >= 1.")
        k = min(top_k, self.metadata.count)
        results = self._first_stage(queries, k)
        if self.reranker is not None:
            results = self._rerank(queries, results)
        return results

    def _first_stage(self, queries: list[str], k: int) -> SearchResults:
        if self.metadata.backend == "exact" and not self.exact:
            outputs = self.loaded.signatures["search_top_k"](
                query=tf.constant(queries, tf.string), top_k=tf.fill([len(queries)], k))
            return SearchResults(
                [[i.decode("utf-8") for i in row] for row in outputs["ids"].numpy()],
                outputs["scores"].numpy().tolist(),
                [[t.decode("utf-8") for t in row] for row in outputs["texts"].numpy()])
        vectors = self.embed(queries)
        if self._faiss is not None:
            indices, scores = ann.search_faiss(self._faiss, vectors, k)
        else:
            indices, scores = top_k_inner_product(vectors, self._embeddings, k)
        hits = [[(int(i), float(s)) for i, s in zip(row, values) if i >= 0]
                for row, values in zip(indices, scores)]
        return SearchResults([[self.ids[i] for i, _ in row] for row in hits],
                             [[s for _, s in row] for row in hits],
                             [[self.texts[i] for i, _ in row] for row in hits])

    def _rerank(self, queries: list[str], results: SearchResults) -> SearchResults:
        pairs_query, pairs_text = [], []
        for query, texts in zip(queries, results.texts):
            head = texts[:self.rerank_top_k]
            pairs_query += [query] * len(head)
            pairs_text += head
        scores = self.reranker(pairs_query, pairs_text).tolist()
        reranked = SearchResults([], [], [])
        start = 0
        for ids, first, texts in zip(results.ids, results.scores, results.texts):
            count = min(len(ids), self.rerank_top_k)
            final = fuse_scores(first[:count], scores[start:start + count], self.rerank_fusion,
                                self.rerank_fusion_weight).tolist()
            # Stable sort: equal scores keep the first stage's order.
            head = sorted(zip(final, ids, texts), key=lambda hit: -hit[0])
            start += count
            # Hits below the re-ranked ones keep their order, scored below the lowest
            # re-ranked score, so that a TREC run (ordered by score) keeps them last.
            floor = (head[-1][0] if head else 0.0) - 1.0
            tail = [(floor - n, i, t) for n, (i, t) in enumerate(zip(ids[count:], texts[count:]))]
            rows = head + tail
            reranked.ids.append([i for _, i, _ in rows])
            reranked.scores.append([float(s) for s, _, _ in rows])
            reranked.texts.append([t for _, _, t in rows])
        return reranked
