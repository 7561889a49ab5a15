"""Ranking metrics with trec_eval's semantics, in plain numpy-free Python.

recall@k, MRR@k (reciprocal rank of the first relevant document within the top
k) and nDCG@k (linear gain, as trec_eval's `ndcg_cut` and BEIR report it) are
a few lines each; pytrec_eval would add a compiled dependency for them. A
document is relevant when its judgement is > 0. Every query with at least one
relevant judgement counts; a query missing from the run scores 0.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

Run = Mapping[str, Sequence[tuple[str, float]]]
Qrels = Mapping[str, Mapping[str, int]]


def recall_at_k(ranked: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """Fraction of the relevant documents among the first `k` of `ranked`.

    Example:

    >>> recall_at_k(["d1", "d2", "d3"], {"d2": 1, "d9": 1}, k=2)
    0.5
    """
    relevant = {doc for doc, rel in judged.items() if rel > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranked[:k])) / len(relevant)


def reciprocal_rank(ranked: Sequence[str], judged: Mapping[str, int], k: int = 10) -> float:
    """1 / rank of the first relevant document within the top `k`, else 0.

    Example:

    >>> reciprocal_rank(["d1", "d2", "d3"], {"d3": 1})
    0.333...
    """
    for rank, doc in enumerate(ranked[:k], start=1):
        if judged.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


def ndcg_at_k(ranked: Sequence[str], judged: Mapping[str, int], k: int = 10) -> float:
    """Normalised discounted cumulative gain at `k`, gain = relevance, discount log2(rank + 1).

    Example:

    >>> ndcg_at_k(["d1", "d2"], {"d2": 1})  # (1 / log2 3) / 1
    0.630...
    """
    dcg = sum(max(judged.get(doc, 0), 0) / math.log2(rank + 1)
              for rank, doc in enumerate(ranked[:k], start=1))
    ideal = sorted((rel for rel in judged.values() if rel > 0), reverse=True)[:k]
    idcg = sum(rel / math.log2(rank + 1) for rank, rel in enumerate(ideal, start=1))
    return dcg / idcg if idcg else 0.0


def evaluate_run(run: Run, qrels: Qrels, recall_ks: Sequence[int] = (1, 10, 100),
                 cutoff: int = 10) -> dict[str, float]:
    """Mean recall@k, MRR@cutoff and nDCG@cutoff of a run over the judged queries.

    Args:
        run: query id -> [(document id, score)], best first.
        qrels: query id -> {document id: relevance}.
        recall_ks: the k of each recall@k reported. Defaults to (1, 10, 100).
        cutoff: int. Depth of MRR and nDCG. Defaults to 10.

    Returns:
        dict `recall@1`, ..., `mrr@10`, `ndcg@10`, `num_queries`.

    Example:

    >>> evaluate_run({"q1": [("d1", 2.0), ("d2", 1.0)]}, {"q1": {"d2": 1}})["mrr@10"]
    0.5
    """
    judged_queries = [q for q, judged in qrels.items() if any(rel > 0 for rel in judged.values())]
    totals = {f"recall@{k}": 0.0 for k in recall_ks}
    totals.update({f"mrr@{cutoff}": 0.0, f"ndcg@{cutoff}": 0.0})
    for query_id in judged_queries:
        ranked = [doc for doc, _ in run.get(query_id, ())]
        judged = qrels[query_id]
        for k in recall_ks:
            totals[f"recall@{k}"] += recall_at_k(ranked, judged, k)
        totals[f"mrr@{cutoff}"] += reciprocal_rank(ranked, judged, cutoff)
        totals[f"ndcg@{cutoff}"] += ndcg_at_k(ranked, judged, cutoff)
    count = len(judged_queries)
    results = {name: (value / count if count else 0.0) for name, value in totals.items()}
    results["num_queries"] = count
    return results
