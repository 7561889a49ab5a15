"""A split of a BEIR data set as the retrieval and re-ranking tasks read it.

`read_beir_split` gives the split's judged queries with the whole corpus
attached (`QuerySet.corpus`): evaluation ranks every document of it. The
first stage (where hard negatives and the documents to re-rank come from) is a
TREC run file when one is given, else BM25 over the corpus. Both tasks read
their data here, so neither imports the other.
"""

from __future__ import annotations

import dataclasses
import os
import random

from kbert.data.text_files import split_sentences
from kbert.retrieval.beir import Document
from kbert.retrieval.beir import qrels_path
from kbert.retrieval.beir import read_corpus
from kbert.retrieval.beir import read_qrels
from kbert.retrieval.beir import read_queries
from kbert.retrieval.beir import read_run
from kbert.retrieval.bm25 import BM25


@dataclasses.dataclass(frozen=True)
class QueryExample:
    """One judged query.

    Args:
        query_id: str.
        text: str.
        relevant: dict. Document id -> relevance (> 0 relevant) from the qrels.
    """

    query_id: str
    text: str
    relevant: dict


class QuerySet(list):
    """The `QueryExample`s of one split, with the corpus they are ranked against.

    Args:
        examples: list of `QueryExample`.
        corpus: list of `Document`.
        first_stage_file: str or None. A TREC run over these queries to mine
            negatives from / re-rank; None means BM25.
    """

    def __init__(self, examples, corpus: list[Document], first_stage_file: str | None = None):
        super().__init__(examples)
        self.corpus = corpus
        self.first_stage_file = first_stage_file
        self._bm25 = None

    def input_texts(self) -> list[list[str]]:
        """The split's text inputs as corpus documents: each query, then each corpus document.

        A document's title (when it has one) is its first line, its text's
        sentences the next; relevance judgements are never included.
        """
        documents = [[e.text] for e in self if e.text.strip()]
        for document in self.corpus:
            lines = ([document.title] if document.title.strip() else []) + split_sentences(
                document.text)
            if lines:
                documents.append(lines)
        return documents

    @property
    def qrels(self) -> dict[str, dict[str, int]]:
        return {e.query_id: e.relevant for e in self}

    def first_stage(self, depth: int) -> dict[str, list[tuple[str, float]]]:
        """The first stage's ranking of each query, best first, `depth` deep.

        Returns:
            dict query id -> [(document id, score)].

        Raises:
            ValueError: the run file misses queries or names unknown documents.
        """
        if self.first_stage_file:
            return self._run_from_file(depth)
        if self._bm25 is None:
            self._bm25 = BM25([d.contents for d in self.corpus])
        return {e.query_id: [(self.corpus[i].doc_id, score) for i, score in self._bm25.search(e.text, depth)]
                for e in self}

    def _run_from_file(self, depth: int) -> dict[str, list[tuple[str, float]]]:
        run = read_run(self.first_stage_file)
        missing = [e.query_id for e in self if e.query_id not in run]
        if missing:
            raise ValueError(f"{self.first_stage_file} ranks no documents for {len(missing)} of the "
                             f"{len(self)} queries (e.g. {missing[:3]}); run the first stage over "
                             "these queries.")
        ids = {d.doc_id for d in self.corpus}
        unknown = sorted({doc for e in self for doc, _ in run[e.query_id] if doc not in ids})
        if unknown:
            raise ValueError(f"{self.first_stage_file} names {len(unknown)} document(s) not in the "
                             f"corpus (e.g. {unknown[:3]}); was it made over another corpus?")
        return {e.query_id: run[e.query_id][:depth] for e in self}


def read_beir_split(data_dir: str, split: str, first_stage_file: str | None = None,
                    corpus: list[Document] | None = None) -> QuerySet:
    """Reads `qrels/<split>.tsv` of a BEIR folder with its queries and corpus.

    Args:
        data_dir: str. The BEIR folder.
        split: str. `train`, `dev` or `test`.
        first_stage_file: str or None. TREC run of the first stage.
        corpus: list of `Document` or None. Already read (saves reading it per split).

    Returns:
        `QuerySet` of the queries judged in the split (file order).

    Raises:
        ValueError: the qrels name queries or documents the files lack.
    """
    qrels = read_qrels(qrels_path(data_dir, split))
    queries = read_queries(os.path.join(data_dir, "queries.jsonl"))
    corpus = corpus if corpus is not None else read_corpus(os.path.join(data_dir, "corpus.jsonl"))
    unknown_queries = [q for q in qrels if q not in queries]
    if unknown_queries:
        raise ValueError(f"{qrels_path(data_dir, split)} judges {len(unknown_queries)} queries not in "
                         f"queries.jsonl (e.g. {unknown_queries[:3]}).")
    ids = {d.doc_id for d in corpus}
    unknown = sorted({doc for judged in qrels.values() for doc in judged if doc not in ids})
    if unknown:
        raise ValueError(f"{qrels_path(data_dir, split)} judges {len(unknown)} documents not in "
                         f"corpus.jsonl (e.g. {unknown[:3]}).")
    examples = [QueryExample(q, queries[q], dict(judged)) for q, judged in qrels.items()]
    return QuerySet(examples, corpus, first_stage_file)


def mine_negatives(examples: QuerySet, count: int, depth: int, rng: random.Random
                   ) -> dict[str, list[str]]:
    """Hard negatives per query: `count` texts drawn from the first stage's top `depth`, minus relevant ones.

    A query whose first stage holds fewer non-relevant documents is topped up
    with random non-relevant ones from the corpus.

    Args:
        examples: `QuerySet`.
        count: int. Negatives per query.
        depth: int. How deep in the first stage's ranking to draw from.
        rng: `random.Random`.

    Returns:
        dict query id -> list of `count` document texts.
    """
    run = examples.first_stage(depth)
    by_id = {d.doc_id: d for d in examples.corpus}
    negatives = {}
    for example in examples:
        pool = [doc for doc, _ in run[example.query_id] if example.relevant.get(doc, 0) <= 0]
        chosen = rng.sample(pool, count) if len(pool) >= count else list(pool)
        while len(chosen) < count:
            extra = examples.corpus[rng.randrange(len(examples.corpus))].doc_id
            if example.relevant.get(extra, 0) <= 0 and (extra not in chosen or len(by_id) <= count):
                chosen.append(extra)
        negatives[example.query_id] = [by_id[doc].contents for doc in chosen]
    return negatives
