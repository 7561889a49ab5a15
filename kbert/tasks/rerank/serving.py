"""Serving signatures of a cross-encoder re-ranker: `query`, `document` -> `score`.

| signature         | inputs                                     | outputs          |
|-------------------|--------------------------------------------|------------------|
| `serving_default` | `query`, `document`, `[batch]` strings      | `score` `[batch]` |
| `serve_ids`       | `token_ids`, `segment_ids`, `padding_mask` | `score`          |
"""

from __future__ import annotations

import tensorflow as tf

from kbert.tasks.serving import IDS_SIGNATURE
from kbert.tasks.serving import ServingModule
from kbert.tasks.serving import ids_inputs
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

    def __init__(self, model, preprocessor):
        super().__init__(model, preprocessor)
        self.score = tf.function(self._score, autograph=False,
                                 input_signature=[text_spec("query"), text_spec("document")])
        self.serve_ids = tf.function(self._serve_ids, autograph=False, input_signature=IDS_SIGNATURE)

    def _outputs(self, inputs):
        return self._finish(self.run(inputs))

    def _finish(self, outputs, padding_mask=None):
        return {"score": tf.cast(outputs, tf.float32)[:, 0]}

    def _pack(self, query, document):
        tokenize = self.preprocessor.tokenize
        return self.preprocessor.pack([tokenize(query), tokenize(document)])

    def _score(self, query, document):
        return self._outputs(self._pack(query, document))

    def _serve_ids(self, token_ids, segment_ids, padding_mask):
        return self._outputs(ids_inputs(token_ids, segment_ids, padding_mask))

    def signatures(self):
        return {"serving_default": self.score, "serve_ids": self.serve_ids}

    def split_signatures(self):
        before = tf.function(self._pack, autograph=False,
                             input_signature=[text_spec("query"), text_spec("document")])
        after = self.after_function(self._finish)
        return {"serving_default": (before, after), "serve_ids": (self.checked_ids_function(), after)}
