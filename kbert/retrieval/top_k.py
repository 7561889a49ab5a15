"""Exact nearest neighbours by inner product, in numpy, a block of documents at a time.

What `--exact` search, the retrieval task's evaluation and the exact index's
CLI path share; the exported exact index does the same in its graph
(`tf.matmul` + `tf.math.top_k`), and tests check that both agree.
"""

from __future__ import annotations

import numpy as np


def top_k_inner_product(queries: np.ndarray, documents: np.ndarray, k: int,
                        block: int = 65536) -> tuple[np.ndarray, np.ndarray]:
    """The `k` documents of largest inner product with each query.

    Args:
        queries: float32 `[num_queries, dim]`.
        documents: float32 `[num_documents, dim]`.
        k: int. Capped at the number of documents.
        block: int. Documents scored at once (bounds memory). Defaults to 65536.

    Returns:
        `(indices, scores)`, each `[num_queries, k]`, best first; ties keep the
        lower document index first.

    Example:

    >>> top_k_inner_product(np.eye(2, dtype="float32"), np.eye(2, dtype="float32"), 1)[0]
    array([[0], [1]])
    """
    k = min(k, len(documents))
    best_scores = np.zeros((len(queries), 0), np.float32)
    best_indices = np.zeros((len(queries), 0), np.int64)
    for start in range(0, len(documents), block):
        block_scores = queries @ documents[start:start + block].T
        block_indices = np.broadcast_to(np.arange(start, start + block_scores.shape[1]),
                                        block_scores.shape)
        # Each block is cut to its own top k first, so the merge sorts at most 2k columns.
        block_scores, block_indices = _best(block_scores, block_indices, k)
        best_scores, best_indices = _best(np.concatenate([best_scores, block_scores], axis=1),
                                          np.concatenate([best_indices, block_indices], axis=1), k)
    return best_indices, best_scores


def _best(scores: np.ndarray, indices: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's `k` best columns, sorted by score, then by document index.

    `np.argpartition` keeps an arbitrary subset of the scores tied with the
    k-th, so the kept width grows to every score >= the k-th (all ties), and
    only those few columns are sorted: the result does not depend on the block
    size or on the partition's order, yet no row is sorted in full.
    """
    width = scores.shape[1]
    if k < width:
        part = np.argpartition(-scores, k - 1, axis=1)
        kth = np.take_along_axis(scores, part[:, k - 1:k], axis=1)
        kept = int((scores >= kth).sum(axis=1).max())
        if kept > k and kept < width:
            part = np.argpartition(-scores, kept - 1, axis=1)
        if kept < width:
            part = part[:, :kept]
            scores = np.take_along_axis(scores, part, axis=1)
            indices = np.take_along_axis(indices, part, axis=1)
    order = np.lexsort((indices, -scores), axis=1)[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(indices, order, axis=1)
