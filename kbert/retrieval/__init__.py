"""Retrieval without a task: files, metrics, search, first stages and sentence vectors.

The floor between `kbert.data` and `kbert.tasks`: what the similarity,
retrieval and re-ranking tasks, `kbert-index` and the benchmarks share, so
that no task folder reaches into another. Nothing here builds a Keras model;
the modules use numpy, TensorFlow ops and `kbert.data`.

- `beir.py`: BEIR data sets (`corpus.jsonl`, `queries.jsonl`, `qrels/`) and TREC runs.
- `query_set.py`: one judged split with its corpus; the first stage; hard-negative mining.
- `metrics.py`: recall@k, MRR@k, nDCG@k with trec_eval's semantics.
- `bm25.py`: Okapi BM25, the lexical first stage and baseline.
- `top_k.py`: exact top-k by inner product in numpy.
- `fusion.py`: a re-ranker's scores fused with the first stage's (RRF, interpolation).
- `embedding.py`: many texts through an embedding function, in input order.
- `pooling.py`: which pooling a sentence encoder uses.
- `pair_dataset.py`: text pairs -> the dual encoder's training batches.

Example:

>>> run = {"q1": [("d2", 0.9), ("d1", 0.4)]}
>>> kbert.retrieval.evaluate_run(run, {"q1": {"d1": 1}})["mrr@10"]
0.5
"""

from kbert.retrieval.beir import Document
from kbert.retrieval.beir import format_qrels
from kbert.retrieval.beir import format_run
from kbert.retrieval.beir import iter_corpus
from kbert.retrieval.beir import read_corpus
from kbert.retrieval.beir import read_qrels
from kbert.retrieval.beir import read_queries
from kbert.retrieval.beir import read_run
from kbert.retrieval.bm25 import BM25
from kbert.retrieval.embedding import embed_texts
from kbert.retrieval.embedding import unit_rows
from kbert.retrieval.fusion import FUSIONS
from kbert.retrieval.fusion import fuse_scores
from kbert.retrieval.metrics import evaluate_run
from kbert.retrieval.metrics import ndcg_at_k
from kbert.retrieval.metrics import recall_at_k
from kbert.retrieval.metrics import reciprocal_rank
from kbert.retrieval.query_set import QuerySet
from kbert.retrieval.query_set import mine_negatives
from kbert.retrieval.query_set import read_beir_split
from kbert.retrieval.top_k import top_k_inner_product
