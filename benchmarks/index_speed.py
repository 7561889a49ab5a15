"""Index build and query time on 100k x 384 vectors: faiss HNSW and IVF, TF exact, against numpy.

    PYTHONPATH=. python benchmarks/index_speed.py [--count=100000 --dim=384 --queries=1000]

Vectors are synthetic but not uniform: unit vectors around 1,000 random
centres (as sentence embeddings cluster by topic), queries are noisy copies of
documents. The reference is brute-force numpy (one `queries @ docs.T` +
`argpartition`) in the same process; recall@10 is measured against it. TF exact
is what the exact index's `search` signature runs (`tf.matmul` +
`tf.math.top_k`); kbert --exact is `kbert-index search --exact`'s numpy search
(blocks of documents, ties broken by document index, so its results do not
depend on the block size).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402


def unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def clustered(count: int, dim: int, queries: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = unit(rng.normal(size=(1000, dim)))
    docs = unit(centres[rng.integers(0, 1000, count)] + 0.6 * rng.normal(size=(count, dim)) / np.sqrt(dim) * 4)
    picks = rng.integers(0, count, queries)
    return docs, unit(docs[picks] + 0.3 * rng.normal(size=(queries, dim)) / np.sqrt(dim) * 4)


def numpy_top_k(queries, docs, k):
    """The reference: what one would write with numpy (no tie rule, one matmul)."""
    scores = queries @ docs.T
    top = np.argpartition(-scores, k, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1)
    return np.take_along_axis(top, order, axis=1)


def timed(fn):
    began = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - began


def recall(found, truth, k=10):
    return float(np.mean([len(set(a[:k]) & set(b[:k])) / k for a, b in zip(found, truth)]))


class _Rows(list):
    """Rows of the table, each printed as soon as it is measured (the first is the reference)."""

    def __init__(self, queries: int):
        super().__init__()
        self.queries = queries

    def append(self, row: dict) -> None:
        super().append(row)
        base = self[0]["query_s"]
        print(f"{row['method']:70s} {row['build_s']:8.2f} {row['query_s']:8.3f} "
              f"{self.queries / row['query_s']:8.0f} {base / row['query_s']:7.1f}x {row['recall@10']:6.3f}",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=1000)
    args = parser.parse_args()
    import tensorflow as tf

    from kbert.index import ann
    from kbert.tasks.retrieval.exact import top_k_inner_product

    import faiss

    docs, queries = clustered(args.count, args.dim, args.queries)
    print(f"{args.count} x {args.dim} vectors, {args.queries} queries, faiss {faiss.__version__}, "
          f"{faiss.omp_get_max_threads()} threads", flush=True)
    print(f"{'method':70s} {'build s':>8s} {'query s':>8s} {'QPS':>8s} {'vs numpy':>8s} {'R@10':>6s}", flush=True)
    rows = _Rows(args.queries)
    truth, seconds = timed(lambda: numpy_top_k(queries, docs, 10))
    rows.append({"method": "numpy brute force (matmul + argpartition)", "build_s": 0.0, "query_s": seconds,
                 "recall@10": 1.0})
    (found, _), seconds = timed(lambda: top_k_inner_product(queries, docs, 10))
    rows.append({"method": "kbert --exact (numpy, blocks, ties by index)", "build_s": 0.0,
                 "query_s": seconds, "recall@10": recall(found, truth)})
    variable = tf.Variable(docs)

    @tf.function(input_signature=[tf.TensorSpec([None, args.dim], tf.float32)])
    def tf_search(q):
        return tf.math.top_k(tf.matmul(q, variable, transpose_b=True), k=10)

    tf_search(queries[:2])
    (result, seconds) = timed(lambda: tf_search(queries))
    rows.append({"method": "TF exact (matmul + top_k)", "build_s": 0.0, "query_s": seconds,
                 "recall@10": recall(result.indices.numpy(), truth)})
    for faiss_type in ("hnsw", "ivf"):
        settings = ann.faiss_settings(args.count, faiss_type)
        index, build = timed(lambda: ann.build_faiss(docs, settings))
        (found, _), seconds = timed(lambda: ann.search_faiss(index, queries, 10))
        rows.append({"method": f"faiss {settings}", "build_s": build, "query_s": seconds,
                     "recall@10": recall(found, truth)})
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
