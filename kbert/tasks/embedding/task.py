"""Sentence embeddings from a pre-trained encoder (`kbert-export` of a pre-trained directory).

Export-only: the model is the encoder with the pooling its directory records
(`sentence_config.json`, e.g. a converted sentence-transformers model), else
mean pooling with L2 normalisation. To train a sentence encoder use
`--task=similarity` or `--task=retrieval`.
"""

from __future__ import annotations

import dataclasses

import keras

from kbert.models.bert_sentence_encoder import BertSentenceEncoder
from kbert.retrieval.pooling import DEFAULT_NORMALIZE
from kbert.retrieval.pooling import DEFAULT_POOLING
from kbert.retrieval.pooling import check_pooling
from kbert.tasks.base import Task
from kbert.tasks.embedding.serving import EmbeddingServingModule
from kbert.tasks.serving import EMBEDDINGS_API


@dataclasses.dataclass
class EmbeddingConfig:
    """How the exported encoder pools: mean and L2-normalised unless the directory says otherwise.

    Args:
        pooling: str. `mean`, `cls` or `max`. Defaults to `mean`.
        normalize: bool. L2-normalise the vectors. Defaults to True.
        feature_layers: str or None. The blocks the `features` signature
            returns, comma-separated, negative counting from the last
            (`kbert-export --feature_layers=-1,-2,-3,-4`). Defaults to None:
            the last four (all of them when the encoder has fewer).
    """

    pooling: str = DEFAULT_POOLING
    normalize: bool = DEFAULT_NORMALIZE
    feature_layers: str | None = None


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
    serving_apis = (EMBEDDINGS_API,)

    def __init__(self, config: EmbeddingConfig | None = None, task_name: str | None = None):
        super().__init__(config, task_name or "embedding")
        check_pooling(self.config, "EmbeddingConfig")

    @classmethod
    def from_sentence_config(cls, sentence_config: dict | None,
                             feature_layers: str | None = None) -> "EmbeddingTask":
        """The task pooling as a directory's `sentence_config.json` says (None: the defaults).

        Args:
            sentence_config: dict or None. The directory's recorded pooling.
            feature_layers: str or None. See `EmbeddingConfig.feature_layers`.

        Returns:
            The `EmbeddingTask`.
        """
        if not sentence_config:
            return cls(EmbeddingConfig(feature_layers=feature_layers))
        return cls(EmbeddingConfig(sentence_config["pooling"], bool(sentence_config["normalize"]),
                                   feature_layers))

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
        return BertSentenceEncoder(encoder, self.config.pooling, self.config.normalize)

    def evaluate(self, model, examples, preprocessor, batch_size):
        raise NotImplementedError("the embedding task is export-only; it has no evaluation.")

    def predict(self, model, examples, preprocessor, batch_size):
        raise NotImplementedError("the embedding task is export-only; it has no predictions.")

    def serving_module(self, model, preprocessor):
        # The encoder with every block's output, for the `features` signature;
        # pooling has no weights, so the sentence encoder is rebuilt around it.
        encoder = model.encoder if isinstance(model, BertSentenceEncoder) else model
        return EmbeddingServingModule(self.build_model(encoder.with_all_layers()), preprocessor,
                                      self.config.feature_layers)
