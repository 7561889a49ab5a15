"""The exact index as a SavedModel: query text in, top-k ids, scores and texts out.

The document vectors, ids and texts are variables of the SavedModel; `search`
embeds the query with the index's encoder (tokenization in the graph) and
ranks every document by `tf.matmul` + `tf.math.top_k`. It needs no other op
than the embedding model's, so TF Serving serves it as it is.

| signature                 | inputs                                  | outputs                              |
|---------------------------|-----------------------------------------|--------------------------------------|
| `search` (= `serving_default`) | `query` `[batch]`                  | `ids`, `scores`, `texts` `[batch, k]` |
| `search_top_k`            | `query` `[batch]`, `top_k` `[batch]` int32 (one value for the request) | same, `k = top_k` |
| `embed`, `embed_document` | `text` `[batch]`                        | `embedding` `[batch, dim]`           |

`k` is at most the number of documents. Brute force costs `count x dim`
multiply-adds per query: about a million 384-wide documents is where the
faiss back-end starts to pay.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from kbert.tasks.serving import text_spec


class EncoderModule(tf.Module):
    """The faiss back-end's SavedModel: the index's encoder alone (`embed`, `embed_document`).

    Args:
        embedding_module: `SentenceEmbeddingServingModule` of the index's model.
    """

    def __init__(self, embedding_module):
        super().__init__(name="kbert_index")
        self.encoder = embedding_module

    def signatures(self) -> dict:
        return {"serving_default": self.encoder.embed_queries, "embed": self.encoder.embed_queries,
                "embed_document": self.encoder.embed_documents}


class ExactIndexModule(EncoderModule):
    """The encoder plus every document vector, searched by brute force in the graph.

    Args:
        embedding_module: `SentenceEmbeddingServingModule` of the index's model.
        embeddings: float32 `[count, dim]`, unit rows.
        ids: list of str, one per row.
        texts: list of str, one per row.
        top_k: int. Hits of the `search` signature. Defaults to 10.

    Example:

    >>> module = ExactIndexModule(embedding_module, vectors, ids, texts)
    >>> module.search(query=tf.constant(["who wrote Emma?"]))["ids"]
    """

    def __init__(self, embedding_module, embeddings: np.ndarray, ids: list[str], texts: list[str],
                 top_k: int = 10):
        super().__init__(embedding_module)
        if not len(ids) == len(texts) == len(embeddings):
            raise ValueError(f"{len(embeddings)} vectors, {len(ids)} ids and {len(texts)} texts; "
                             "one of each per document.")
        self.embeddings = tf.Variable(np.asarray(embeddings, np.float32), trainable=False,
                                      name="embeddings")
        self.ids = tf.Variable(tf.constant(ids, tf.string), trainable=False, name="ids")
        self.texts = tf.Variable(tf.constant(texts, tf.string), trainable=False, name="texts")
        self.top_k = tf.constant(min(int(top_k), len(ids)), tf.int32)
        self.search = tf.function(self._search, autograph=False, input_signature=[text_spec("query")])
        self.search_top_k = tf.function(
            self._search_top_k, autograph=False,
            input_signature=[text_spec("query"), tf.TensorSpec([None], tf.int32, name="top_k")])

    def _ranked(self, query, k):
        vectors = tf.math.l2_normalize(self.encoder.embed_queries(query)["embedding"], axis=-1)
        scores = tf.matmul(vectors, self.embeddings, transpose_b=True)
        best, indices = tf.math.top_k(scores, k=k)
        return {"ids": tf.gather(self.ids, indices), "scores": best,
                "texts": tf.gather(self.texts, indices)}

    def _search(self, query):
        return self._ranked(query, self.top_k)

    def _search_top_k(self, query, top_k):
        # One k per request: every row of the output has the same width.
        checks = [tf.debugging.assert_positive(top_k, message="top_k must be >= 1"),
                  tf.debugging.assert_equal(top_k, top_k[:1], message=(
                      "top_k must be the same for every query of a request"))]
        with tf.control_dependencies(checks):
            k = tf.minimum(top_k[0], tf.shape(self.ids, out_type=tf.int32)[0])
        return self._ranked(query, k)

    def signatures(self) -> dict:
        return {**super().signatures(), "serving_default": self.search, "search": self.search,
                "search_top_k": self.search_top_k}
