"""`top_k_inner_product` (the `--exact` search) against a brute-force full sort, ties included."""

import numpy as np
import pytest

from kbert.retrieval.top_k import top_k_inner_product


def _brute_force(queries, documents, k):
    scores = queries @ documents.T
    indices = [sorted(range(len(documents)), key=lambda d, row=row: (-row[d], d))[:k] for row in scores]
    return np.asarray(indices), np.take_along_axis(scores, np.asarray(indices), axis=1)


@pytest.mark.parametrize("k,block", [(1, 7), (3, 5), (5, 64), (10, 3), (40, 16), (60, 7)])
def test_top_k_equals_a_full_sort_with_ties_by_document_index(k, block):
    rng = np.random.default_rng(k * 100 + block)
    # Small integer vectors: exact float scores with many ties, at and across the k-th place.
    queries = rng.integers(-2, 3, size=(9, 4)).astype(np.float32)
    documents = rng.integers(-2, 3, size=(50, 4)).astype(np.float32)
    documents[20:30] = documents[3]  # a run of identical documents spanning blocks
    indices, scores = top_k_inner_product(queries, documents, k, block=block)
    want_indices, want_scores = _brute_force(queries, documents, min(k, 50))
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(scores, want_scores)


def test_all_scores_tied_keeps_the_lowest_indices():
    queries = np.ones((2, 3), np.float32)
    documents = np.ones((20, 3), np.float32)
    indices, scores = top_k_inner_product(queries, documents, 4, block=6)
    np.testing.assert_array_equal(indices, [[0, 1, 2, 3]] * 2)
    np.testing.assert_array_equal(scores, np.full((2, 4), 3.0, np.float32))
