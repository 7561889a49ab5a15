"""`build_index`: a corpus embedded (batched, streaming) into a new index version.

Building or adding writes one complete new version (`kbert.index.metadata`):
the documents are read as a stream and embedded in batches with the same
serving function the index's SavedModel runs, with a progress line every few
thousand documents. Adding documents embeds only the new ones: the old
vectors (and, for faiss, the old graph or lists) are read back and extended.
Everything is checked (ids, the model's dimension and weights) before the
version is published by one rename, so a failed build leaves the index as it
was.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from typing import Callable, Iterable

import numpy as np
import tensorflow as tf

from kbert.export.saved_model import publish_version
from kbert.files import iter_jsonl
from kbert.files import write_text
from kbert.index import ann
from kbert.index.encoders import SentenceModel
from kbert.index.encoders import load_sentence_model
from kbert.index.exact import EncoderModule
from kbert.index.exact import ExactIndexModule
from kbert.index.metadata import BACKENDS
from kbert.index.metadata import DOCUMENTS
from kbert.index.metadata import EMBEDDINGS
from kbert.index.metadata import FAISS_FILE
from kbert.index.metadata import INDEX_INFO
from kbert.index.metadata import IndexMetadata
from kbert.index.metadata import extra_path
from kbert.index.metadata import index_versions
from kbert.index.metadata import locate_index
from kbert.index.metadata import read_index_metadata
from kbert.tasks.retrieval.beir import iter_corpus
from kbert.tasks.similarity.embedding import embed_texts
from kbert.tasks.similarity.embedding import unit_rows

log = logging.getLogger("kbert.index")
# Documents embedded between progress lines (and sorted by length together).
CHUNK = 4096


@dataclasses.dataclass
class BuildSummary:
    """What a build did: `added` documents in `seconds`, `count` in the index now, at `path`."""

    path: str
    added: int
    count: int
    seconds: float

    @property
    def docs_per_second(self) -> float:
        return self.added / self.seconds if self.seconds else 0.0

    def line(self) -> str:
        return (f"kbert-index: embedded {self.added} documents in {self.seconds:.1f} s "
                f"({self.docs_per_second:.1f} docs/s); {self.count} in {self.path}")


@dataclasses.dataclass
class _Existing:
    version_dir: str
    metadata: IndexMetadata
    ids: list[str]
    texts: list[str]
    embeddings: np.ndarray


def build_index(corpus_files: Iterable[str], index_dir: str, model_dir: str | None = None,
                backend: str | None = None, add: bool = False, overwrite: bool = False,
                batch_size: int = 64, max_seq_length: int | None = None, faiss_options: dict | None = None,
                serving_top_k: int = 10, check: bool = True, keep_versions: int = 2,
                progress: Callable[[str], None] = log.info) -> BuildSummary:
    """Embeds BEIR `corpus.jsonl` files into a new version of the index at `index_dir`.

    Args:
        corpus_files: BEIR corpus files (`_id`, `title`, `text` per line).
        index_dir: str. The index directory (numbered versions below it).
        model_dir: str or None. The sentence encoder (see
            `kbert.index.encoders.load_sentence_model`); with `add` it defaults
            to the one the index was built with.
        backend: str or None. `exact` or `faiss`; defaults to the index's own
            when adding, else `exact`.
        add: bool. Add to the existing index (new ids only) instead of building one.
        overwrite: bool. Replace an existing index with one of these documents only.
        batch_size: int. Texts per embedding call. Defaults to 64.
        max_seq_length: int or None. For pre-trained directories (see `load_sentence_model`).
        faiss_options: dict or None. `kbert.index.ann.faiss_settings` arguments.
        serving_top_k: int. Hits of the exact index's `search` signature. Defaults to 10.
        check: bool. Run the fresh-process ops check on the SavedModel.
        keep_versions: int. Versions kept after publishing (older ones removed). Defaults to 2.
        progress: callable receiving progress lines.

    Returns:
        `BuildSummary`.

    Raises:
        ValueError: a bad corpus line, a duplicate id, a model that does not
            match the index, or an index already there (without `add` or
            `overwrite`); nothing is written then.

    Example:

    >>> build_index(["corpus.jsonl"], "indexes/docs", model_dir="minilm/", backend="faiss")
    """
    existing = _existing(index_dir, add, overwrite)
    backend = backend or (existing.metadata.backend if existing else "exact")
    if backend not in BACKENDS:
        raise ValueError(f"--backend={backend!r}; expected one of {BACKENDS}.")
    if keep_versions < 1:
        raise ValueError(f"--keep_versions={keep_versions}; it must be >= 1.")
    if existing is not None and model_dir is None:
        model_dir = existing.metadata.model["model_dir"]
    if model_dir is None:
        raise ValueError("--model_dir is required to build an index.")
    model = load_sentence_model(model_dir, max_seq_length)
    if existing is not None:
        _check_same_model(existing.metadata, model, index_dir, model_dir)
    faiss_settings = None
    if backend == "faiss":
        ann.import_faiss()  # fail before embedding anything
    started = time.perf_counter()
    ids, texts, vectors = _embed_corpus(corpus_files, model, batch_size, existing, progress)
    seconds = time.perf_counter() - started
    if existing is not None:
        ids, texts = existing.ids + ids, existing.texts + texts
        vectors = np.concatenate([existing.embeddings, vectors]) if len(existing.ids) else vectors
    faiss_index = None
    if backend == "faiss":
        faiss_index, faiss_settings = _faiss_index(existing, vectors, faiss_options or {})
    metadata = IndexMetadata(backend=backend, dimension=model.dimension, count=len(ids),
                             model=model.description, faiss=faiss_settings,
                             serving_top_k=int(serving_top_k))
    path = _publish(index_dir, model, metadata, ids, texts, vectors, faiss_index, check)
    _prune(index_dir, keep_versions)
    summary = BuildSummary(path, len(ids) - (len(existing.ids) if existing else 0), len(ids), seconds)
    progress(summary.line())
    return summary


def _existing(index_dir: str, add: bool, overwrite: bool) -> _Existing | None:
    if add and overwrite:
        raise ValueError("pass --add or --overwrite, not both.")
    versions = index_versions(index_dir)
    if not versions:
        if add:
            raise FileNotFoundError(f"--add: --index_dir={index_dir} holds no index to add to; build "
                                    "one first (without --add).")
        return None
    if not add:
        if overwrite:
            return None
        metadata = read_index_metadata(index_dir)
        raise ValueError(f"--index_dir={index_dir} already holds an index (version {versions[-1]}, "
                         f"{metadata.count} documents); pass --add to add documents to it or "
                         "--overwrite to replace it.")
    version_dir = locate_index(index_dir)
    metadata = read_index_metadata(version_dir)
    ids, texts = read_documents(version_dir)
    embeddings = np.load(extra_path(version_dir, EMBEDDINGS))
    return _Existing(version_dir, metadata, ids, texts, embeddings)


def _check_same_model(metadata: IndexMetadata, model: SentenceModel, index_dir: str,
                      model_dir: str) -> None:
    built_with = metadata.model.get("model_dir")
    if model.dimension != metadata.dimension:
        raise ValueError(f"--index_dir={index_dir} holds {metadata.dimension}-dimensional vectors of "
                         f"{built_with}; --model_dir={model_dir} gives {model.dimension}-dimensional "
                         "ones. Add with the index's own model, or build a new index.")
    if model.description["fingerprint"] != metadata.model.get("fingerprint"):
        raise ValueError(f"--index_dir={index_dir} was built with {built_with}; --model_dir={model_dir} "
                         "has other weights, and their vectors do not compare. Add with the index's "
                         "own model, or build a new index.")


def _embed_corpus(corpus_files, model: SentenceModel, batch_size: int, existing: _Existing | None,
                  progress) -> tuple[list[str], list[str], np.ndarray]:
    seen = {doc_id: "the index" for doc_id in (existing.ids if existing else ())}
    ids, texts, chunks, pending = [], [], [], []
    started = time.perf_counter()

    def flush():
        chunks.append(unit_rows(embed_texts(model.module.embed_documents,
                                            [d.contents for d in pending], batch_size)))
        ids.extend(d.doc_id for d in pending)
        texts.extend(d.contents for d in pending)
        pending.clear()
        elapsed = time.perf_counter() - started
        progress(f"kbert-index: embedded {len(ids)} documents, {len(ids) / elapsed:.1f} docs/s")

    files = [corpus_files] if isinstance(corpus_files, str) else list(corpus_files)
    if not files:
        raise ValueError("--corpus is required: one or more BEIR corpus.jsonl files.")
    for path in files:
        for document in iter_corpus(path, seen):
            pending.append(document)
            if len(pending) == CHUNK:
                flush()
    if pending:
        flush()
    if not ids:
        raise ValueError(f"{', '.join(files)} holds no documents.")
    return ids, texts, np.concatenate(chunks)


def _faiss_index(existing: _Existing | None, vectors: np.ndarray, options: dict):
    if existing is not None and existing.metadata.backend == "faiss" and not options:
        # Extend the stored graph or lists: the old vectors are neither embedded nor indexed again.
        settings = existing.metadata.faiss
        index = ann.read_faiss(extra_path(existing.version_dir, FAISS_FILE), settings)
        index.add(np.ascontiguousarray(vectors[len(existing.ids):], dtype=np.float32))
        return index, settings
    settings = ann.faiss_settings(len(vectors), **options)
    return ann.build_faiss(vectors, settings), settings


def _publish(index_dir, model: SentenceModel, metadata: IndexMetadata, ids, texts, vectors,
             faiss_index, check: bool) -> str:
    if metadata.backend == "exact":
        module = ExactIndexModule(model.module, vectors, ids, texts, metadata.serving_top_k)
    else:
        module = EncoderModule(model.module)

    def write_extra(extra: str) -> None:
        np.save(os.path.join(extra, EMBEDDINGS), vectors)
        rows = (json.dumps({"_id": doc_id, "text": text}, ensure_ascii=False) + "\n"
                for doc_id, text in zip(ids, texts))
        with tf.io.gfile.GFile(os.path.join(extra, DOCUMENTS), "w") as f:
            for row in rows:
                f.write(row)
        if faiss_index is not None:
            ann.write_faiss(faiss_index, os.path.join(extra, FAISS_FILE))
        write_text(os.path.join(extra, INDEX_INFO), metadata.to_json())

    info = {"model_type": "index", "backend": metadata.backend, "count": metadata.count}
    return publish_version(module, index_dir, None, info, model.vocab_file, check, write_extra)


def _prune(index_dir: str, keep: int) -> None:
    for version in index_versions(index_dir)[:-keep]:
        tf.io.gfile.rmtree(os.path.join(index_dir, str(version)))


def read_documents(version_dir: str) -> tuple[list[str], list[str]]:
    """The ids and texts of an index version, in index order."""
    ids, texts = [], []
    for _, row in iter_jsonl(extra_path(version_dir, DOCUMENTS)):
        ids.append(row["_id"])
        texts.append(row["text"])
    return ids, texts
