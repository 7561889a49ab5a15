"""Embedding many texts in Python: batched through the serving graph, in input order.

Evaluation and `kbert-index build` embed texts with the same `tf.function`
the exported model serves (`SentenceEmbeddingServingModule`), so stored
vectors equal served ones. Texts are sorted by length within each chunk so
that a batch pads little, then put back in order.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import tensorflow as tf


def embed_texts(embed: Callable, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """Vectors of `texts` from a `text` -> `{"embedding"}` function, `[len(texts), dim]` float32.

    Args:
        embed: a serving function such as `module.embed_documents`.
        texts: sequence of str.
        batch_size: int. Texts per call. Defaults to 64.

    Returns:
        float32 array, row i the vector of `texts[i]`.

    Example:

    >>> vectors = embed_texts(module.embed_queries, ["a cat", "a dog"])
    """
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}; it must be >= 1.")
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    rows: list[np.ndarray] = []
    for start in range(0, len(order), batch_size):
        chunk = [texts[i] for i in order[start:start + batch_size]]
        rows.append(embed(text=tf.constant(chunk, tf.string))["embedding"].numpy())
    if not rows:
        return np.zeros((0, 0), np.float32)
    vectors = np.concatenate(rows).astype(np.float32, copy=False)
    result = np.empty_like(vectors)
    result[np.asarray(order)] = vectors
    return result


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (zero rows stay zero), so dot products are cosines."""
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)
