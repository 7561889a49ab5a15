"""BM25 ranks by the query's words; ties keep the index order."""

from kbert.retrieval.bm25 import BM25


def test_bm25_ranks_the_matching_document_first():
    bm25 = BM25(["the cat sat on the mat", "a dog barked at the postman", "cats and dogs"])
    assert bm25.search("dog postman", k=1)[0][0] == 1
    assert [i for i, _ in bm25.search("zebra", k=3)] == [0, 1, 2]  # no match: ties, index order
