"""What an index is, on disk: versions of a SavedModel with the index files beside it.

    <index_dir>/<version>/                 a SavedModel (TF Serving loads it as it is)
        saved_model.pb, variables/         exact: `search`, `search_top_k`, `embed`, `embed_document`
                                           faiss: `serving_default` (= `embed`), `embed_document`
        assets.extra/index.json            `IndexMetadata`: model, pooling, dimension, count,
                                           metric, back-end (TF Serving ignores assets.extra/)
        assets.extra/documents.jsonl       `{"_id", "text"}` per vector, in index order
        assets.extra/embeddings.npy        float32 [count, dimension], unit rows
        assets.extra/index.faiss           the faiss back-end's index (faiss's own writer)
        assets.extra/vocab.txt, kbert_export.json

A version is written under a hidden name and renamed into place when complete,
so readers (and a polling model server) see whole versions only; adding
documents writes the next version.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import tensorflow as tf

from kbert.files import read_json

INDEX_INFO = "index.json"
DOCUMENTS = "documents.jsonl"
EMBEDDINGS = "embeddings.npy"
FAISS_FILE = "index.faiss"
EXTRA = "assets.extra"
BACKENDS = ("exact", "faiss")
# Vectors are stored L2-normalised, so inner product is cosine similarity.
METRIC = "cosine"
FORMAT_VERSION = 1


@dataclasses.dataclass
class IndexMetadata:
    """`index.json`: what an index holds and how it was made.

    Args:
        backend: str. `exact` or `faiss`.
        dimension: int. Length of the vectors.
        count: int. Number of documents.
        model: dict. The encoder: `model_dir`, `kind` (`pretrained`,
            `similarity`, `retrieval`), `pooling`, `normalize`,
            `max_seq_length`, `shared_towers`, `fingerprint` (sha256 of its
            weight files).
        metric: str. `cosine` (inner product of unit vectors).
        faiss: dict or None. The faiss index's type and settings.
        serving_top_k: int. Hits returned by the served `search` signature.
        format_version: int.

    Example:

    >>> read_index_metadata("indexes/docs").count
    1354
    """

    backend: str
    dimension: int
    count: int
    model: dict
    metric: str = METRIC
    faiss: dict | None = None
    serving_top_k: int = 10
    format_version: int = FORMAT_VERSION

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str) -> "IndexMetadata":
        names = {field.name for field in dataclasses.fields(cls)}
        missing = sorted({"backend", "dimension", "count", "model"} - set(values))
        if missing:
            raise ValueError(f"{source}: missing {missing}; is it a kbert-index index.json?")
        return cls(**{key: value for key, value in values.items() if key in names})


def index_versions(index_dir: str) -> list[int]:
    """Numbered versions of `index_dir` that hold an `index.json`, oldest first."""
    if not tf.io.gfile.isdir(index_dir):
        return []
    found = []
    for name in tf.io.gfile.listdir(index_dir):
        name = name.rstrip("/")
        if name.isdigit() and tf.io.gfile.exists(os.path.join(index_dir, name, EXTRA, INDEX_INFO)):
            found.append(int(name))
    return sorted(found)


def locate_index(index_dir: str) -> str:
    """The version directory to read: `index_dir` itself if it is one, else its latest version.

    Raises:
        FileNotFoundError: no index there, with the command that builds one.
    """
    if tf.io.gfile.exists(os.path.join(index_dir, EXTRA, INDEX_INFO)):
        return index_dir.rstrip("/")
    found = index_versions(index_dir)
    if not found:
        what = "does not exist" if not tf.io.gfile.exists(index_dir) else "holds no index"
        raise FileNotFoundError(f"--index_dir={index_dir} {what} (no <version>/{EXTRA}/{INDEX_INFO}); "
                                f"build one with kbert-index build --index_dir={index_dir}.")
    return os.path.join(index_dir, str(found[-1]))


def read_index_metadata(index_dir: str) -> IndexMetadata:
    """The `IndexMetadata` of an index directory's latest version (or of a version directory)."""
    path = os.path.join(locate_index(index_dir), EXTRA, INDEX_INFO)
    values = read_json(path)
    return IndexMetadata.from_dict(values, path)


def extra_path(version_dir: str, name: str) -> str:
    """Path of one of the index files of a version."""
    return os.path.join(version_dir, EXTRA, name)
