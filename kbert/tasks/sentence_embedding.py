"""The serving module of every sentence encoder: `text` -> `embedding`.

Shared by the tasks whose model embeds texts (similarity, retrieval, and the
export-only embedding task, which adds a `features` signature) and by
`kbert-index`, which embeds a corpus with the same `tf.function` that is
exported, so stored vectors equal served ones. It sits beside `serving.py`
rather than in a task folder because task folders never import each other.

| signature         | inputs                                    | outputs                      |
|-------------------|-------------------------------------------|------------------------------|
| `serving_default` | `text` `[batch]` string                   | `embedding` `[batch, dim]`   |
| `embeddings`      | `text`                                    | `embedding`, `num_tokens` int32 `[batch]` |
| `serve_ids`       | `token_ids`, `segment_ids`, `padding_mask` | `embedding`                  |
| `query`, `document` (towers differ) | `text`                  | `embedding` of that tower    |

With two towers (a retrieval model trained with separate query and document
encoders) `serving_default` is the query tower, the one online traffic uses.
`embeddings` is `serving_default` plus the pieces each text was read as
(`[CLS]` and `[SEP]` included, after truncation): kbert-serve's OpenAI-style
`POST /v1/embeddings` runs it to report `usage` without tokenizing twice; it is
a signature of its own so that `serving_default`'s answers keep their shape.
"""

from __future__ import annotations

import tensorflow as tf

from kbert.tasks.serving import IDS_SIGNATURE
from kbert.tasks.serving import ServingModule
from kbert.tasks.serving import ids_inputs
from kbert.tasks.serving import text_spec


class SentenceEmbeddingServingModule(ServingModule):
    """Raw text in; one pooled (and, as trained, normalised) vector per text out.

    Args:
        query_tower: `kbert.models.BertSentenceEncoder` (the only tower when shared).
        preprocessor: `kbert.data.TextPreprocessor`.
        document_tower: `BertSentenceEncoder` or None (shared towers).

    Example:

    >>> module = SentenceEmbeddingServingModule(tower, preprocessor)
    >>> module.signatures()["serving_default"](tf.constant(["a film"]))["embedding"].shape
    TensorShape([1, 384])
    """

    def __init__(self, query_tower, preprocessor, document_tower=None):
        super().__init__(query_tower, preprocessor)
        self.hold_models(document_tower=document_tower)
        self.serve_text = tf.function(self._serve_query, autograph=False,
                                      input_signature=[text_spec("text")])
        self.serve_ids = tf.function(self._serve_ids, autograph=False, input_signature=IDS_SIGNATURE)
        self.serve_usage = tf.function(self._serve_usage, autograph=False,
                                       input_signature=[text_spec("text")])
        self.serve_document = None
        if document_tower is not None:
            self.serve_document = tf.function(self._serve_document, autograph=False,
                                              input_signature=[text_spec("text")])

    def _pack(self, text):
        return self.preprocessor.pack([self.preprocessor.tokenize(text)])

    def _serve_query(self, text):
        return self._finish(self.run(self._pack(text)))

    def _serve_usage(self, text):
        inputs = self._pack(text)
        return self._finish_usage(self.run(inputs), inputs["padding_mask"])

    def _finish(self, outputs, padding_mask=None):
        return {"embedding": tf.cast(outputs, tf.float32)}

    def _finish_usage(self, outputs, padding_mask):
        return {**self._finish(outputs),
                "num_tokens": tf.reduce_sum(tf.cast(padding_mask, tf.int32), axis=1)}

    def _serve_document(self, text):
        return {"embedding": tf.cast(self.document_tower(self._pack(text), training=False), tf.float32)}

    def _serve_ids(self, token_ids, segment_ids, padding_mask):
        return self._finish(self.run(ids_inputs(token_ids, segment_ids, padding_mask)))

    def signatures(self):
        signatures = {"serving_default": self.serve_text, "serve_ids": self.serve_ids,
                      "embeddings": self.serve_usage}
        if self.serve_document is not None:
            signatures.update(query=self.serve_text, document=self.serve_document)
        return signatures

    def split_signatures(self):
        # The query tower's signatures; a separate document tower's stays whole.
        before = tf.function(self._pack, autograph=False, input_signature=[text_spec("text")])
        after = self.after_function(self._finish)
        split = {"serving_default": (before, after),
                 "embeddings": (before, self.after_function(self._finish_usage)),
                 "serve_ids": (self.checked_ids_function(), after)}
        if self.serve_document is not None:
            split["query"] = (before, after)
        return split

    @property
    def embed_queries(self):
        """The query side's `tf.function` (`text` -> `{"embedding"}`)."""
        return self.serve_text

    @property
    def embed_documents(self):
        """The document side's `tf.function` (the query side's when towers are shared)."""
        return self.serve_document or self.serve_text


def sentence_serving_module(model, preprocessor) -> SentenceEmbeddingServingModule:
    """The embedding serving module of a `BertDualEncoder` (or a lone `BertSentenceEncoder`).

    Args:
        model: `kbert.models.BertDualEncoder` (its towers; the document tower
            only when not shared) or `kbert.models.BertSentenceEncoder`.
        preprocessor: `kbert.data.TextPreprocessor`.

    Returns:
        `SentenceEmbeddingServingModule`.

    Example:

    >>> module = sentence_serving_module(dual_encoder, preprocessor)
    >>> vectors = module.embed_documents(text=tf.constant(["a film"]))["embedding"]
    """
    if not hasattr(model, "query_tower"):
        # A lone tower: a BertSentenceEncoder, or a stand-in for one (the export's ONNX Runtime check).
        return SentenceEmbeddingServingModule(model, preprocessor)
    return SentenceEmbeddingServingModule(model.query_tower, preprocessor,
                                          None if model.shared else model.document_tower)
