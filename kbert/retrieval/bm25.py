"""Okapi BM25 over a small corpus: the lexical first stage and the baseline to beat.

Hand-written because it is twenty lines and serves as the reference every
dense result is compared with (and the default source of hard negatives);
rank_bm25 or Pyserini would add a dependency (Pyserini a JVM) for it. Words are
lower-cased `\\w+` runs, without stemming; k1 and b are Anserini's defaults.
"""

from __future__ import annotations

import collections
import math
import re
from typing import Sequence

import numpy as np

_WORD = re.compile(r"\w+", re.UNICODE)


def words(text: str) -> list[str]:
    """Lower-cased word tokens of `text`."""
    return _WORD.findall(text.lower())


class BM25:
    """A BM25 index over a list of texts; `search` gives the best `k` of them for a query.

    Args:
        texts: sequence of str. The documents, in index order.
        k1: float. Term-frequency saturation. Defaults to 0.9.
        b: float. Length normalisation. Defaults to 0.4.

    Example:

    >>> bm25 = BM25(["the cat sat", "a dog barked"])
    >>> bm25.search("cat", k=1)
    [(0, 1.1...)]
    """

    def __init__(self, texts: Sequence[str], k1: float = 0.9, b: float = 0.4):
        self.k1, self.b = k1, b
        self.postings: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
        lengths = []
        for index, text in enumerate(texts):
            counts = collections.Counter(words(text))
            lengths.append(sum(counts.values()))
            for word, count in counts.items():
                self.postings[word].append((index, count))
        self.lengths = np.asarray(lengths, dtype=np.float64)
        self.average_length = max(float(self.lengths.mean()) if len(lengths) else 0.0, 1e-9)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for `query`, `[num_texts]`."""
        scores = np.zeros(len(self.lengths))
        count = len(self.lengths)
        for word in set(words(query)):
            postings = self.postings.get(word)
            if not postings:
                continue
            idf = math.log(1 + (count - len(postings) + 0.5) / (len(postings) + 0.5))
            index = np.fromiter((i for i, _ in postings), dtype=np.int64, count=len(postings))
            tf = np.fromiter((c for _, c in postings), dtype=np.float64, count=len(postings))
            norm = self.k1 * (1 - self.b + self.b * self.lengths[index] / self.average_length)
            scores[index] += idf * tf * (self.k1 + 1) / (tf + norm)
        return scores

    def search(self, query: str, k: int = 10) -> list[tuple[int, float]]:
        """The `k` best documents as (index, score), best first (ties: lower index first)."""
        scores = self.scores(query)
        order = np.lexsort((np.arange(len(scores)), -scores))[:k]
        return [(int(i), float(scores[i])) for i in order]
