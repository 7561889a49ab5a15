"""Serving signatures of a pre-trained encoder: sentence embeddings and per-token features.

| signature | inputs | outputs |
|---|---|---|
| `serving_default` | `text` string `[batch]` | `embedding` float32 `[batch, hidden]` |
| `features` | `text` string `[batch]` | `features` float32 `[batch, length, layers, hidden]`, `token_ids`, `word_ids` int32 `[batch, length]`, `num_tokens` int32 `[batch]` |
| `serve_ids` | `token_ids`, `segment_ids`, `padding_mask` | `embedding` |

The embedding pools as the directory records (`sentence_config.json`), else
mean pooling L2-normalised (sentence-transformers' default), so a dot product
of two embeddings is their cosine similarity. `features` gives the chosen
layers' vector of every piece of `[CLS] pieces [SEP]` (the BERT paper's
feature-based use; `tools/extract_features.py` writes the same numbers), with
the index of the whitespace-separated word each piece belongs to (-1 on
`[CLS]`, `[SEP]` and padding), so callers can pool pieces into words.
"""

from __future__ import annotations

import tensorflow as tf

from kbert.data.words import split_words
from kbert.layers.layer_mix import layer_indexes
from kbert.tasks.embedding.features import layer_features
from kbert.tasks.embedding.features import word_aligned_inputs
from kbert.tasks.sentence_embedding import SentenceEmbeddingServingModule
from kbert.tasks.serving import Signature
from kbert.tasks.serving import text_spec


class EmbeddingServingModule(SentenceEmbeddingServingModule):
    """Raw text in; one pooled vector per text, or the chosen layers' per-piece vectors, out.

    Args:
        sentence_encoder: `kbert.models.BertSentenceEncoder` whose encoder has
            `output_all_layers=True` (`BertEncoder.with_all_layers()`).
        preprocessor: `kbert.data.TextPreprocessor`.
        feature_layers: ints or a comma-separated string, or None. The layers
            the `features` signature returns (negative counts from the last).
            Defaults to the last four (`-1,-2,-3,-4`), or all if fewer.

    Example:

    >>> tower = BertSentenceEncoder(encoder.with_all_layers())
    >>> module = EmbeddingServingModule(tower, preprocessor)
    >>> module.signatures()["features"](tf.constant(["a film"]))["features"].shape
    TensorShape([1, 4, 4, 384])
    """

    def __init__(self, sentence_encoder, preprocessor, feature_layers=None):
        super().__init__(sentence_encoder, preprocessor)
        encoder = sentence_encoder.encoder
        if feature_layers is None:
            feature_layers = [-i for i in range(1, min(4, encoder.num_layers) + 1)]
        self.feature_layers = layer_indexes(feature_layers, encoder.num_layers, "--feature_layers")

    def declared_signatures(self):
        # `features` runs the encoder's layers itself, not the model: whole.
        return {**super().declared_signatures(),
                "features": Signature([text_spec("text")], body=self._serve_features)}

    def _serve_features(self, text):
        inputs, word_ids = word_aligned_inputs(self.preprocessor,
                                               split_words(self.preprocessor.clean(text)))
        return {"features": layer_features(self.model.encoder, inputs, self.feature_layers),
                "token_ids": inputs["token_ids"], "word_ids": word_ids,
                "num_tokens": tf.reduce_sum(inputs["padding_mask"], axis=1)}
