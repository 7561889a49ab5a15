"""Serving signatures of sentence embeddings: `text` -> `embedding`.

The embedding is the mean of the encoder's token outputs over real tokens,
L2-normalised (sentence-transformers' mean pooling), so a dot product of two
embeddings is their cosine similarity.
"""

from __future__ import annotations

import tensorflow as tf

from kbert.tasks.serving import IDS_SIGNATURE
from kbert.tasks.serving import ServingModule
from kbert.tasks.serving import ids_inputs
from kbert.tasks.serving import text_spec


class EmbeddingServingModule(ServingModule):
    """Raw text in; one L2-normalised mean-pooled vector per text out.

    Args:
        encoder: `kbert.models.BertEncoder`.
        preprocessor: `kbert.data.TextPreprocessor`.

    Example:

    >>> module = EmbeddingServingModule(encoder, preprocessor)
    >>> module.signatures()["serving_default"](tf.constant(["a film"]))["embedding"].shape
    TensorShape([1, 384])
    """

    def __init__(self, encoder, preprocessor):
        super().__init__(encoder, preprocessor)
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

    def signatures(self):
        return {"serving_default": self.serve_text, "serve_ids": self.serve_ids}
