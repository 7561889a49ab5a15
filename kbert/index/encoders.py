"""The models an index uses: the sentence encoder that embeds, and an optional cross-encoder.

`load_sentence_model` accepts what `kbert-index build --model_dir` may name:
a pre-trained directory (`kbert-pretrain` or `kbert-convert` output; it pools
as its `sentence_config.json` records, else by mean, L2-normalised) or a
fine-tuned directory of a task that embeds sentences (`similarity`,
`retrieval`: their `serving_apis` include `embeddings`). `load_reranker`
accepts a fine-tuned directory of a re-ranking task (`rerank`) or its
`kbert-export`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Callable

import numpy as np
import tensorflow as tf

from kbert.checkpoints.finetuned import TASK_CONFIG
from kbert.checkpoints.finetuned import TASK_MODEL
from kbert.checkpoints.model_dir import ModelDir
from kbert.checkpoints.model_dir import model_dir_kind
from kbert.checkpoints.model_dir import open_model_dir
from kbert.checkpoints.pretrained import ENCODER_WEIGHTS
from kbert.export.saved_model import versions
from kbert.export.serving_modules import DEFAULT_EMBEDDING_LENGTH
from kbert.export.serving_modules import serving_module
from kbert.export.serving_modules import serving_task
from kbert.tasks import TASKS
from kbert.tasks import get_task
from kbert.tasks.sentence_embedding import SentenceEmbeddingServingModule
from kbert.tasks.serving import EMBEDDINGS_API
from kbert.tasks.serving import RERANK_API


@dataclasses.dataclass
class SentenceModel:
    """A sentence encoder ready to embed: its serving module and what the index records of it.

    Args:
        module: `SentenceEmbeddingServingModule` (`embed_queries`, `embed_documents`).
        vocab_file: str. Its `vocab.txt`.
        description: dict. `IndexMetadata.model`.
    """

    module: SentenceEmbeddingServingModule
    vocab_file: str
    description: dict

    @property
    def dimension(self) -> int:
        return int(self.module.model.dimension)


def fingerprint(model_dir: str) -> str:
    """sha256 of a model directory's weight files: the same weights give the same value."""
    digest = hashlib.sha256()
    for name in (ENCODER_WEIGHTS, TASK_MODEL):
        path = os.path.join(model_dir, name)
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path, "rb") as f:
                while chunk := f.read(1 << 22):
                    digest.update(chunk)
    return digest.hexdigest()


def load_sentence_model(model_dir: str, max_seq_length: int | None = None) -> SentenceModel:
    """Loads a pre-trained or fine-tuned similarity/retrieval directory as a sentence encoder.

    Args:
        model_dir: str. The directory.
        max_seq_length: int or None. Longest input in pieces for a pre-trained
            directory; defaults to its `sentence_config.json` value, else 128
            (capped at the encoder's positions). Fine-tuned models use theirs.

    Returns:
        A `SentenceModel`.

    Raises:
        FileNotFoundError: not a kbert model directory.
        ValueError: fine-tuned for a task that does not embed sentences.

    Example:

    >>> model = load_sentence_model("minilm/")
    >>> model.description["pooling"], model.dimension
    ('mean', 384)
    """
    directory = open_model_dir(model_dir, flag="--model_dir")
    if directory.is_finetuned:
        return _finetuned(directory)
    length = max_seq_length or (directory.sentence_config or {}).get("max_seq_length")
    length = min(int(length or DEFAULT_EMBEDDING_LENGTH), directory.max_sequence_length)
    task = serving_task(directory)
    module = serving_module(directory, length)
    return SentenceModel(module, directory.vocab_file, _description(
        model_dir, "pretrained", task.config.pooling, task.config.normalize, length, True))


def _tasks_answering(api: str) -> list[str]:
    """The trainable tasks whose exports answer `api` (`Task.serving_apis`), in registry order."""
    return [name for name, task in TASKS.items() if task.trainable and api in task.serving_apis]


def _finetuned(directory: ModelDir) -> SentenceModel:
    task_config = directory.task_config
    if EMBEDDINGS_API not in get_task(task_config.task).serving_apis:
        raise ValueError(f"{directory.where} was fine-tuned for --task={task_config.task}; an index "
                         "embeds with a pre-trained directory or a "
                         f"{' or '.join(_tasks_answering(EMBEDDINGS_API))} model.")
    task = serving_task(directory)
    module = serving_module(directory)
    return SentenceModel(module, directory.vocab_file, _description(
        directory.path, task_config.task, task.config.pooling, task.config.normalize,
        task_config.max_seq_length, module.document_tower is None))


def _description(model_dir, kind, pooling, normalize, max_seq_length, shared) -> dict:
    return {"model_dir": os.path.abspath(model_dir) if "://" not in model_dir else model_dir,
            "kind": kind, "pooling": pooling, "normalize": bool(normalize),
            "max_seq_length": int(max_seq_length), "shared_towers": bool(shared),
            "fingerprint": fingerprint(model_dir)}


Reranker = Callable[[list[str], list[str]], np.ndarray]


def load_reranker(path: str) -> Reranker:
    """A cross-encoder as a function `(queries, documents) -> scores`.

    Args:
        path: str. A fine-tuned directory of a re-ranking task (`rerank`), or
            its `kbert-export` (a version directory or the base holding
            numbered versions).

    Returns:
        Callable taking two equal-length lists of str, returning float32 scores.

    Raises:
        FileNotFoundError: nothing loadable there.
        ValueError: the model is not a re-ranker.

    Example:

    >>> score = load_reranker("runs/rerank")
    >>> score(["who wrote Emma?"], ["Emma is a novel by Jane Austen."])
    array([3.1], dtype=float32)
    """
    if model_dir_kind(path) == "finetuned":
        directory = open_model_dir(path, flag="--rerank_model_dir")
        if RERANK_API not in get_task(directory.task_config.task).serving_apis:
            raise ValueError(f"--rerank_model_dir={path} was fine-tuned for "
                             f"--task={directory.task_config.task}, not "
                             f"{' or '.join(_tasks_answering(RERANK_API))}.")
        function = serving_module(directory).score
    else:
        version_dir = path
        if not tf.io.gfile.exists(os.path.join(path, "saved_model.pb")) and versions(path):
            version_dir = os.path.join(path, str(versions(path)[-1]))
        if not tf.io.gfile.exists(os.path.join(version_dir, "saved_model.pb")):
            raise FileNotFoundError(f"--rerank_model_dir={path} is neither a fine-tuned rerank directory "
                                    f"({TASK_CONFIG}) nor a kbert-export of one (saved_model.pb).")
        function = tf.saved_model.load(version_dir).signatures.get("serving_default")
        inputs = set(function.structured_input_signature[1]) if function is not None else set()
        if inputs != {"query", "document"}:
            raise ValueError(f"--rerank_model_dir={path}: serving_default takes {sorted(inputs)}; a "
                             "re-ranker takes query and document (export a --task=rerank model).")

    def score(queries: list[str], documents: list[str]) -> np.ndarray:
        if not queries:
            return np.zeros((0,), np.float32)
        outputs = function(query=tf.constant(queries, tf.string), document=tf.constant(documents, tf.string))
        return outputs["score"].numpy()

    return score
