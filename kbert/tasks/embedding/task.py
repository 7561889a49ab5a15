"""Sentence embeddings from a pre-trained encoder (`kbert-export` of a pre-trained directory).

Export-only for now: the model is the encoder itself, served with mean pooling.
"""

from __future__ import annotations

import dataclasses

import keras

from kbert.tasks.base import Task
from kbert.tasks.embedding.serving import EmbeddingServingModule


@dataclasses.dataclass
class EmbeddingConfig:
    """The embedding task's own hyperparameters: none yet (mean pooling, L2-normalised)."""


class EmbeddingTask(Task):
    """A pre-trained encoder served as a sentence-embedding model.

    Args:
        config: `EmbeddingConfig` or None.
        task_name: str or None. Defaults to `embedding`.

    Example:

    >>> module = EmbeddingTask().serving_module(encoder, preprocessor)
    """

    name = "embedding"
    config_class = EmbeddingConfig
    trainable = False

    def __init__(self, config: EmbeddingConfig | None = None, task_name: str | None = None):
        super().__init__(config, task_name or "embedding")

    @property
    def model_type(self) -> str:
        return "embedding"

    def read(self, data, split):
        raise NotImplementedError("the embedding task is export-only; it reads no data.")

    def dataset(self, examples, preprocessor, batch_size, is_training, seed=None):
        raise NotImplementedError("the embedding task is export-only; it has no dataset.")

    def training_batch(self, batch):
        raise NotImplementedError("the embedding task is export-only; it does not train.")

    def build_model(self, encoder: keras.Model) -> keras.Model:
        return encoder

    def evaluate(self, model, examples, preprocessor, batch_size):
        raise NotImplementedError("the embedding task is export-only; it has no evaluation.")

    def predict(self, model, examples, preprocessor, batch_size):
        raise NotImplementedError("the embedding task is export-only; it has no predictions.")

    def serving_module(self, model, preprocessor):
        return EmbeddingServingModule(model, preprocessor)
