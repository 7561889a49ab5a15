"""Fusing a re-ranker's scores with the first stage's ranking of the same hits.

A cross-encoder trained on a few hundred queries can be worse alone than the
bi-encoder whose hits it re-orders, yet the two make different mistakes;
production pipelines therefore often combine both rankings rather than trust
the re-ranker alone. Two standard ways, both per query over the re-scored hits:

- `rrf`: reciprocal-rank fusion, `1 / (k + first_rank) + 1 / (k + rerank_rank)`
  (Cormack et al., 2009). Uses ranks only, so no score scale matters.
- `interpolate`: each list's scores standardised over the query's hits
  (z-scores: the bi-encoder's cosines and the cross-encoder's logits have
  unrelated scales), then `(1 - weight) * first + weight * rerank`.

`none` is the re-ranker's order alone.

Reference: Cormack, Clarke and Buettcher, 2009. "Reciprocal Rank Fusion
outperforms Condorcet and individual Rank Learning Methods".
"""

from __future__ import annotations

import numpy as np

FUSIONS = ("none", "rrf", "interpolate")
RRF_K = 60
DEFAULT_WEIGHT = 0.5


def check_fusion(fusion: str, weight: float = DEFAULT_WEIGHT) -> None:
    """Raises a clear error for an unknown `fusion` or a `weight` outside [0, 1]."""
    if fusion not in FUSIONS:
        raise ValueError(f"--rerank_fusion={fusion!r}; expected one of {FUSIONS}.")
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"--rerank_fusion_weight={weight}; it must be in [0, 1] "
                         "(the re-ranker's share of the interpolated score).")


def fuse_scores(first_scores, rerank_scores, fusion: str = "none",
                weight: float = DEFAULT_WEIGHT, rrf_k: int = RRF_K) -> np.ndarray:
    """The final score of each of one query's hits; sort by it, highest first.

    Args:
        first_scores: sequence of float. The first stage's scores of the hits,
            in the first stage's order (best first).
        rerank_scores: sequence of float. The cross-encoder's scores of the same hits.
        fusion: str. `none` (the cross-encoder's scores), `rrf` or `interpolate`.
        weight: float. `interpolate`: the cross-encoder's share. Defaults to 0.5.
        rrf_k: int. `rrf`'s constant. Defaults to 60.

    Returns:
        float64 `[hits]` scores.

    Example:

    >>> fuse_scores([0.9, 0.8, 0.1], [0.0, 2.0, 1.0], "rrf", rrf_k=1)
    array([0.75      , 0.83333333, 0.58333333])
    """
    check_fusion(fusion, weight)
    first = np.asarray(first_scores, np.float64)
    rerank = np.asarray(rerank_scores, np.float64)
    if first.shape != rerank.shape:
        raise ValueError(f"{len(first)} first-stage scores but {len(rerank)} re-ranker scores.")
    if fusion == "none" or len(first) == 0:
        return rerank
    if fusion == "rrf":
        # Ranks 1..n; ties in the re-ranker's scores keep the first stage's order.
        rerank_rank = np.empty(len(rerank))
        rerank_rank[np.argsort(-rerank, kind="stable")] = np.arange(1, len(rerank) + 1)
        return 1.0 / (rrf_k + np.arange(1, len(first) + 1)) + 1.0 / (rrf_k + rerank_rank)
    return (1.0 - weight) * _standardise(first) + weight * _standardise(rerank)


def _standardise(scores: np.ndarray) -> np.ndarray:
    spread = scores.std()
    return (scores - scores.mean()) / spread if spread > 0 else np.zeros_like(scores)
