"""Serving signatures of a pre-trained encoder: sentence embeddings and per-token features.

| signature | inputs | outputs |
|---|---|---|
| `serving_default` | `text` string `[batch]` | `embedding` float32 `[batch, hidden]` |
| `features` | `text` string `[batch]` | `features` float32 `[batch, length, layers, hidden]`, `token_ids`, `word_ids` int32 `[batch, length]`, `num_tokens` int32 `[batch]` |
| `serve_ids` | `token_ids`, `segment_ids`, `padding_mask` | `embedding` |

The embedding is the mean of the encoder's token outputs over real tokens,
L2-normalised (sentence-transformers' mean pooling), so a dot product of two
embeddings is their cosine similarity. `features` gives the chosen layers'
vector of every piece of `[CLS] pieces [SEP]` (the BERT paper's feature-based
use; `tools/extract_features.py` writes the same numbers), with the index of
the whitespace-separated word each piece belongs to (-1 on `[CLS]`, `[SEP]`
and padding), so callers can pool pieces into words.
"""

from __future__ import annotations

import tensorflow as tf

from kbert.layers.layer_mix import layer_indexes
from kbert.tasks.embedding.features import layer_features
from kbert.tasks.embedding.features import word_aligned_inputs
from kbert.tasks.ner.words import split_words
from kbert.tasks.serving import IDS_SIGNATURE
from kbert.tasks.serving import ServingModule
from kbert.tasks.serving import ids_inputs
from kbert.tasks.serving import text_spec


class EmbeddingServingModule(ServingModule):
    """Raw text in; one L2-normalised mean-pooled vector per text out.

    Args:
        encoder: `kbert.models.BertEncoder`.
        preprocessor: `kbert.data.TextPreprocessor`.
        feature_layers: ints or a comma-separated string, or None. The layers
            the `features` signature returns (negative counts from the last).
            Defaults to the last four (`-1,-2,-3,-4`), or all if fewer.

    Example:

    >>> module = EmbeddingServingModule(encoder, preprocessor)
    >>> module.signatures()["serving_default"](tf.constant(["a film"]))["embedding"].shape
    TensorShape([1, 384])
    """

    def __init__(self, encoder, preprocessor, feature_layers=None):
        encoder = encoder.with_all_layers()
        super().__init__(encoder, preprocessor)
        if feature_layers is None:
            feature_layers = [-i for i in range(1, min(4, encoder.num_layers) + 1)]
        self.feature_layers = layer_indexes(feature_layers, encoder.num_layers, "feature_layers")
        self.serve_features = tf.function(self._serve_features, autograph=False,
                                          input_signature=[text_spec("text")])
        self.serve_text = tf.function(self._serve_text, autograph=False,
                                      input_signature=[text_spec("text")])
        self.serve_ids = tf.function(self._serve_ids, autograph=False, input_signature=IDS_SIGNATURE)

    def _embed(self, inputs):
        sequence = tf.cast(self.run(inputs)["sequence_output"], tf.float32)
        mask = tf.cast(inputs["padding_mask"], tf.float32)[:, :, tf.newaxis]
        mean = tf.reduce_sum(sequence * mask, axis=1) / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)
        return {"embedding": tf.math.l2_normalize(mean, axis=-1)}

    def _serve_text(self, text):
        return self._embed(self.preprocessor.pack([self.preprocessor.tokenize(text)]))

    def _serve_ids(self, token_ids, segment_ids, padding_mask):
        return self._embed(ids_inputs(token_ids, segment_ids, padding_mask))

    def _serve_features(self, text):
        inputs, word_ids = word_aligned_inputs(self.preprocessor,
                                               split_words(self.preprocessor.clean(text)))
        return {"features": layer_features(self.model, inputs, self.feature_layers),
                "token_ids": inputs["token_ids"], "word_ids": word_ids,
                "num_tokens": tf.reduce_sum(inputs["padding_mask"], axis=1)}

    def signatures(self):
        return {"serving_default": self.serve_text, "features": self.serve_features,
                "serve_ids": self.serve_ids}
