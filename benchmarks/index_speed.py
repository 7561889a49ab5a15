"""Index build and query time on 100k x 384 vectors: faiss HNSW and IVF, TF exact, against numpy.

    PYTHONPATH=. python benchmarks/index_speed.py [--count=100000 --dim=384 --queries=1000]

Vectors are synthetic but not uniform: unit vectors around `--centres` random
centres (as sentence embeddings cluster by topic), queries are noisy copies of
documents. `--doc_noise` is the norm of a document's offset from its centre
(the centre has norm 1) and `--query_noise` that of a query's from its document:
the defaults (1.0 and 0.5) give what MiniLM's sentence vectors look like
(same-topic documents at cosine ~0.5, a query at ~0.9 from its document);
`--doc_noise=2.4 --query_noise=1.2` is the earlier, nearly uniform run, the
worst case of any ANN index. faiss is built once per type and searched at
every `--ef_search` / `--nprobe` value, so one run gives the recall/QPS
trade-off. The reference is brute-force numpy (one `queries @ docs.T` +
`argpartition`) in the same process; recall@10 is measured against it. TF exact
is what the exact index's `search` signature runs (`tf.matmul` +
`tf.math.top_k`); kbert --exact is `kbert-index search --exact`'s numpy search
(blocks of documents, ties broken by document index, so its results do not
depend on the block size). Writes benchmarks/results/index_speed.json
(benchmarks/result_file.py); the vectors are synthetic, so --data_dir and
--work_dir go unused.
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

from benchmarks import result_file  # noqa: E402


def unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def clustered(count: int, dim: int, queries: int, centres: int = 1000, doc_noise: float = 1.0,
              query_noise: float = 0.5, seed: int = 0):
    """`count` documents around `centres` unit centres and `queries` noisy copies of documents.

    A noise vector of norm `n` is `n * normal(dim) / sqrt(dim)`.
    """
    rng = np.random.default_rng(seed)
    middle = unit(rng.normal(size=(centres, dim)))
    docs = unit(middle[rng.integers(0, centres, count)] + doc_noise * rng.normal(size=(count, dim)) / np.sqrt(dim))
    picks = rng.integers(0, count, queries)
    return docs, unit(docs[picks] + query_noise * rng.normal(size=(queries, dim)) / np.sqrt(dim))


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
    parser.add_argument("--centres", type=int, default=1000)
    parser.add_argument("--doc_noise", type=float, default=1.0)
    parser.add_argument("--query_noise", type=float, default=0.5)
    parser.add_argument("--hnsw_m", type=int, default=32)
    parser.add_argument("--ef_construction", type=int, default=200,
                        help="kbert's default; 40-80 builds several times faster on 2 cores.")
    parser.add_argument("--ef_search", default="64,128,256", help="Comma-separated values searched.")
    parser.add_argument("--nprobe", default="8,32,128", help="Comma-separated values searched.")
    parser.add_argument("--types", default="hnsw,ivf")
    result_file.add_flags(parser, "index_speed")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    import tensorflow as tf

    from kbert.index import ann
    from kbert.retrieval.top_k import top_k_inner_product

    import faiss

    docs, queries = clustered(args.count, args.dim, args.queries, args.centres, args.doc_noise,
                              args.query_noise)
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
    for faiss_type in args.types.split(","):
        settings = ann.faiss_settings(args.count, faiss_type, hnsw_m=args.hnsw_m,
                                      ef_construction=args.ef_construction)
        index, build = timed(lambda: ann.build_faiss(docs, settings))
        knob = "ef_search" if faiss_type == "hnsw" else "nprobe"
        for value in [int(v) for v in getattr(args, knob).split(",")]:
            settings = {**settings, knob: value}
            ann.configure_search(index, settings)
            (found, _), seconds = timed(lambda: ann.search_faiss(index, queries, 10))
            rows.append({"method": f"faiss {settings}", "build_s": build, "query_s": seconds,
                         "recall@10": recall(found, truth)})
    print(json.dumps(rows))
    base = rows[0]["query_s"]
    figures = [{**row, "vs_numpy": round(base / row["query_s"], 2)} for row in rows]
    shown = {"--exact": figures[1], "TF exact": figures[2]}
    for row in figures[3:]:  # one setting per faiss type: kbert's efSearch, a middle nprobe
        if "'ef_search': 128" in row["method"]:
            shown["faiss HNSW"] = row
        elif "'nprobe': 32" in row["method"]:
            shown["faiss IVF"] = row
    result_file.write_result(
        args, name="index_speed", title="Vector index speed", area="retrieval",
        load_average_at_start=load,
        headline=f"{args.count:,} x {args.dim} vectors: " + ", ".join(
            f"{name} {row['vs_numpy']:.1f}x" for name, row in shown.items())
            + f" numpy brute force; recall@10 >= {min(r['recall@10'] for r in shown.values()):.3f}.",
        reference="numpy brute force (matmul + argpartition) in the same process",
        aim="recall@10 >= 0.99 of exact search",
        met=all(r["recall@10"] >= 0.99 for r in shown.values()),
        figures=figures, method=__doc__.split("\n\n", 2)[2])


if __name__ == "__main__":
    main()
