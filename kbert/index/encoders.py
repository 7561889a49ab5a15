"""The models an index uses: the sentence encoder that embeds, and an optional cross-encoder.

`load_sentence_model` accepts what `kbert-index build --model_dir` may name:
a pre-trained directory (`kbert-pretrain` or `kbert-convert` output; it pools
as its `sentence_config.json` records, else by mean, L2-normalised) or a
fine-tuned `similarity` / `retrieval` directory. `load_reranker` accepts a
fine-tuned `rerank` directory or its `kbert-export`.
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
from kbert.checkpoints.finetuned import load_finetuned
from kbert.checkpoints.pretrained import BERT_CONFIG
from kbert.checkpoints.pretrained import ENCODER_WEIGHTS
from kbert.checkpoints.pretrained import load_encoder
from kbert.checkpoints.pretrained import read_sentence_config
from kbert.checkpoints.pretrained import read_tokenizer_config
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.export.saved_model import versions
from kbert.tasks import EmbeddingTask
from kbert.tasks import get_task
from kbert.tasks.sentence_embedding import SentenceEmbeddingServingModule

SENTENCE_TASKS = ("similarity", "retrieval")


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
    if tf.io.gfile.exists(os.path.join(model_dir, TASK_CONFIG)):
        return _finetuned(model_dir)
    if not all(tf.io.gfile.exists(os.path.join(model_dir, name)) for name in (BERT_CONFIG, ENCODER_WEIGHTS)):
        raise FileNotFoundError(
            f"--model_dir={model_dir} is not a kbert model directory ({TASK_CONFIG}, or {BERT_CONFIG} "
            f"+ {ENCODER_WEIGHTS}); point it at a kbert-convert/kbert-pretrain output or a fine-tuned "
            "similarity/retrieval model_dir.")
    settings = read_tokenizer_config(model_dir)
    if settings["vocab_file"] is None:
        raise FileNotFoundError(f"{model_dir}: vocab.txt is missing; the index needs it to tokenize.")
    sentence_config = read_sentence_config(model_dir)
    encoder = load_encoder(model_dir, dropout=0.0)
    length = max_seq_length or (sentence_config or {}).get("max_seq_length") or 128
    length = min(int(length), encoder.max_sequence_length)
    task = EmbeddingTask.from_sentence_config(sentence_config)
    do_lower_case = True if settings["do_lower_case"] is None else settings["do_lower_case"]
    preprocessor = TextPreprocessor.from_vocab_file(settings["vocab_file"], do_lower_case, length)
    module = task.serving_module(encoder, preprocessor)
    return SentenceModel(module, settings["vocab_file"], _description(
        model_dir, "pretrained", task.config.pooling, task.config.normalize, length, True))


def _finetuned(model_dir: str) -> SentenceModel:
    model, task_config, vocab_file = load_finetuned(model_dir)
    if task_config.task not in SENTENCE_TASKS:
        raise ValueError(f"--model_dir={model_dir} was fine-tuned for --task={task_config.task}; an index "
                         f"embeds with a pre-trained directory or a {' or '.join(SENTENCE_TASKS)} model.")
    task = get_task(task_config.task).from_description(task_config.to_dict())
    preprocessor = TextPreprocessor.from_vocab_file(vocab_file, task_config.do_lower_case,
                                                    task_config.max_seq_length)
    module = task.serving_module(model, preprocessor)
    return SentenceModel(module, vocab_file, _description(
        model_dir, task_config.task, task.config.pooling, task.config.normalize,
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
        path: str. A fine-tuned `rerank` directory, or its `kbert-export`
            (a version directory or the base holding numbered versions).

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
    if tf.io.gfile.exists(os.path.join(path, TASK_CONFIG)):
        model, task_config, vocab_file = load_finetuned(path)
        if task_config.task != "rerank":
            raise ValueError(f"--rerank_model_dir={path} was fine-tuned for --task={task_config.task}, "
                             "not rerank.")
        task = get_task("rerank").from_description(task_config.to_dict())
        preprocessor = TextPreprocessor.from_vocab_file(vocab_file, task_config.do_lower_case,
                                                        task_config.max_seq_length)
        function = task.serving_module(model, preprocessor).score
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
