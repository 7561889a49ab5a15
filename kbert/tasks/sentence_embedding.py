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

from kbert.tasks.serving import ServingModule
from kbert.tasks.serving import Signature
from kbert.tasks.serving import ids_signature
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

    def declared_signatures(self):
        # The query tower's signatures split around it; a separate document tower's stays whole.
        text = Signature([text_spec("text")], before=self._pack, after=self._finish)
        signatures = {"serving_default": text, "serve_ids": ids_signature(self._finish),
                      "embeddings": Signature([text_spec("text")], before=self._pack,
                                              after=self._finish_usage)}
        if self.document_tower is not None:
            signatures.update(query=text, document=Signature([text_spec("text")],
                                                             body=self._serve_document))
        return signatures

    def _pack(self, text):
        return self.preprocessor.pack([self.preprocessor.tokenize(text)])

    def _finish(self, outputs, padding_mask=None):
        return {"embedding": tf.cast(outputs, tf.float32)}

    def _finish_usage(self, outputs, padding_mask):
        return {**self._finish(outputs),
                "num_tokens": tf.reduce_sum(tf.cast(padding_mask, tf.int32), axis=1)}

    def _serve_document(self, text):
        return {"embedding": tf.cast(self.document_tower(self._pack(text), training=False), tf.float32)}

    @property
    def embed_queries(self):
        """The query side's `tf.function` (`text` -> `{"embedding"}`): `serving_default`."""
        return self.signatures()["serving_default"]

    @property
    def embed_documents(self):
        """The document side's `tf.function` (the query side's when towers are shared)."""
        signatures = self.signatures()
        return signatures.get("document", signatures["serving_default"])


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
