"""BEIR data sets and TREC run files: the formats retrieval people already use.

A BEIR data set is a folder:

    corpus.jsonl        one document a line: {"_id": "d1", "title": "...", "text": "..."}
    queries.jsonl       one query a line:    {"_id": "q1", "text": "..."}
    qrels/<split>.tsv   header `query-id<TAB>corpus-id<TAB>score`, then one judgement a line

A TREC run file has one retrieved document a line, `qid Q0 docid rank score tag`;
TREC qrels (`qid 0 docid relevance`) are read too. Readers name the file and
line of any bad input; the corpus is read as a stream so that a large one is
never held twice.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Iterator

import tensorflow as tf

from kbert.files import iter_jsonl

QRELS_HEADER = ("query-id", "corpus-id", "score")


@dataclasses.dataclass(frozen=True)
class Document:
    """One corpus document.

    Args:
        doc_id: str. Its `_id`.
        text: str. Its `text`.
        title: str. Its `title` (may be empty).
    """

    doc_id: str
    text: str
    title: str = ""

    @property
    def contents(self) -> str:
        """What is embedded or scored: `title text`, as BEIR's dense models read documents."""
        return f"{self.title} {self.text}" if self.title else self.text


def _field(value: dict, key: str, path: str, number: int, required: bool = True) -> str:
    if key not in value or value[key] is None:
        if required:
            raise ValueError(f"{path}:{number}: no {key!r} field; every line needs '_id' and "
                             f"'text' (has {sorted(value)}).")
        return ""
    item = value[key]
    if isinstance(item, bool) or not isinstance(item, (str, int)):
        raise ValueError(f"{path}:{number}: {key!r} is {type(item).__name__}; expected a string.")
    return str(item)


def iter_corpus(path: str, seen: dict[str, str] | None = None) -> Iterator[Document]:
    """Streams the documents of a BEIR `corpus.jsonl`, refusing bad and duplicate lines.

    Args:
        path: str. The corpus file.
        seen: dict or None. Ids already known (id -> where), e.g. those of an
            index being added to; filled as the file is read.

    Yields:
        `Document`s in file order.

    Raises:
        ValueError: a line is not JSON, lacks `_id` or `text`, or repeats an
            id; the message names the file and line.

    Example:

    >>> for document in iter_corpus("scifact/corpus.jsonl"):
    ...     print(document.doc_id, document.contents[:40])
    """
    seen = {} if seen is None else seen
    # BEIR files are read leniently: bytes that are not UTF-8 become U+FFFD.
    for number, value in iter_jsonl(path, errors="replace"):
        doc_id = _field(value, "_id", path, number)
        text = _field(value, "text", path, number)
        if doc_id in seen:
            raise ValueError(f"{path}:{number}: duplicate document id {doc_id!r} (first at "
                             f"{seen[doc_id]}); ids must be unique.")
        seen[doc_id] = f"{path}:{number}"
        yield Document(doc_id, text, _field(value, "title", path, number, required=False))


def read_corpus(path: str) -> list[Document]:
    """All documents of a BEIR `corpus.jsonl` (see `iter_corpus`)."""
    documents = list(iter_corpus(path))
    if not documents:
        raise ValueError(f"{path} holds no documents.")
    return documents


def read_queries(path: str) -> dict[str, str]:
    """A BEIR `queries.jsonl` (or any JSONL of `_id` and `text`) as id -> text.

    Args:
        path: str. The queries file.

    Returns:
        dict of query id to text, in file order.

    Raises:
        ValueError: a bad line, a missing field, a duplicate id, or no queries.
    """
    queries: dict[str, str] = {}
    for number, value in iter_jsonl(path, errors="replace"):
        query_id = _field(value, "_id", path, number)
        if query_id in queries:
            raise ValueError(f"{path}:{number}: duplicate query id {query_id!r}.")
        queries[query_id] = _field(value, "text", path, number)
    if not queries:
        raise ValueError(f"{path} holds no queries.")
    return queries


def read_qrels(path: str) -> dict[str, dict[str, int]]:
    """Relevance judgements: BEIR's TSV (with header) or TREC's `qid 0 docid rel`.

    Args:
        path: str. A `qrels/<split>.tsv` or TREC qrels file.

    Returns:
        dict query id -> {document id: relevance}.

    Raises:
        ValueError: a line with the wrong number of columns or a non-integer
            relevance, naming the file and line.
    """
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{path} does not exist.")
    with tf.io.gfile.GFile(path) as f:
        lines = f.read().splitlines()
    qrels: dict[str, dict[str, int]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        row = line.split("\t") if "\t" in line else line.split()
        if number == 1 and tuple(c.strip().lower() for c in row) == QRELS_HEADER:
            continue
        if len(row) == 4:  # TREC: qid iteration docid relevance
            row = [row[0], row[2], row[3]]
        if len(row) != 3:
            raise ValueError(f"{path}:{number}: {len(row)} columns; expected query-id, corpus-id, "
                             "score (BEIR) or qid 0 docid relevance (TREC).")
        try:
            relevance = int(float(row[2]))
        except ValueError:
            raise ValueError(f"{path}:{number}: relevance {row[2]!r} is not a number.") from None
        qrels.setdefault(row[0].strip(), {})[row[1].strip()] = relevance
    if not qrels:
        raise ValueError(f"{path} holds no judgements.")
    return qrels


def qrels_path(data_dir: str, split: str) -> str:
    """`<data_dir>/qrels/<split>.tsv`, with a clear error listing the splits there."""
    path = os.path.join(data_dir, "qrels", f"{split}.tsv")
    if not tf.io.gfile.exists(path):
        folder = os.path.join(data_dir, "qrels")
        found = sorted(tf.io.gfile.listdir(folder)) if tf.io.gfile.isdir(folder) else []
        raise FileNotFoundError(f"no {split} judgements: {path} is missing (qrels/ has {found}); "
                                "a BEIR data set has corpus.jsonl, queries.jsonl and "
                                "qrels/<split>.tsv.")
    return path


def write_jsonl(path: str, rows: list[dict]) -> str:
    """JSON lines text of `rows` (for `kbert.files.write_text`)."""
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def format_qrels(qrels: dict[str, dict[str, int]]) -> str:
    """BEIR qrels TSV text, header included."""
    lines = ["\t".join(QRELS_HEADER)]
    for query_id, judged in qrels.items():
        lines += [f"{query_id}\t{doc_id}\t{relevance}" for doc_id, relevance in judged.items()]
    return "\n".join(lines) + "\n"


def format_run(run: dict[str, list[tuple[str, float]]], tag: str = "kbert") -> str:
    """TREC run text: `qid Q0 docid rank score tag`, ranks from 1 in the given order.

    Args:
        run: dict query id -> [(document id, score)], best first.
        tag: str. The run's name (no spaces).

    Returns:
        The file's text.

    Example:

    >>> format_run({"q1": [("d3", 0.9), ("d1", 0.5)]})
    'q1 Q0 d3 1 0.900000 kbert\\nq1 Q0 d1 2 0.500000 kbert\\n'
    """
    if not tag or any(c.isspace() for c in tag):
        raise ValueError(f"run tag {tag!r} must be one word.")
    lines = []
    for query_id, hits in run.items():
        for rank, (doc_id, score) in enumerate(hits, start=1):
            lines.append(f"{query_id} Q0 {doc_id} {rank} {score:.6f} {tag}")
    return "".join(line + "\n" for line in lines)


def read_run(path: str) -> dict[str, list[tuple[str, float]]]:
    """A TREC run file as query id -> [(document id, score)], best first.

    Documents are ordered as trec_eval orders them: by score, ties by
    document id (descending); the rank column is not trusted.

    Raises:
        ValueError: a line without six columns or with a bad score.
    """
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{path} does not exist.")
    run: dict[str, list[tuple[str, float]]] = {}
    with tf.io.gfile.GFile(path) as f:
        for number, line in enumerate(f, start=1):
            row = line.split()
            if not row:
                continue
            if len(row) != 6:
                raise ValueError(f"{path}:{number}: {len(row)} columns; a TREC run line is "
                                 "'qid Q0 docid rank score tag'.")
            try:
                score = float(row[4])
            except ValueError:
                raise ValueError(f"{path}:{number}: score {row[4]!r} is not a number.") from None
            run.setdefault(row[0], []).append((row[2], score))
    return {query_id: sorted(hits, key=lambda hit: (hit[1], hit[0]), reverse=True)
            for query_id, hits in run.items()}
