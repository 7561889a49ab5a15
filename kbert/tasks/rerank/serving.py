"""Serving signatures of a cross-encoder re-ranker: `query`, `document` -> `score`.

| signature         | inputs                                     | outputs          |
|-------------------|--------------------------------------------|------------------|
| `serving_default` | `query`, `document`, `[batch]` strings      | `score` `[batch]` |
| `serve_ids`       | `token_ids`, `segment_ids`, `padding_mask` | `score`          |
"""

from __future__ import annotations

import tensorflow as tf

from kbert.tasks.serving import ServingModule
from kbert.tasks.serving import Signature
from kbert.tasks.serving import ids_signature
from kbert.tasks.serving import text_spec


class RerankServingModule(ServingModule):
    """Query and document text in (packed `[CLS] query [SEP] document [SEP]`); one score out.

    Args:
        model: `kbert.models.BertClassifier` with one output.
        preprocessor: `kbert.data.TextPreprocessor`.

    Example:

    >>> module = RerankServingModule(cross_encoder, preprocessor)
    >>> module.score(query=tf.constant(["who"]), document=tf.constant(["Marie Curie ..."]))["score"]
    """

    def declared_signatures(self):
        return {"serving_default": Signature([text_spec("query"), text_spec("document")],
                                             before=self._pack, after=self._finish),
                "serve_ids": ids_signature(self._finish)}

    @property
    def score(self):
        """`serving_default`'s `tf.function`: `query`, `document` -> `{"score"}`."""
        return self.signatures()["serving_default"]

    def _finish(self, outputs, padding_mask=None):
        return {"score": tf.cast(outputs, tf.float32)[:, 0]}

    def _pack(self, query, document):
        tokenize = self.preprocessor.tokenize
        return self.preprocessor.pack([tokenize(query), tokenize(document)])
