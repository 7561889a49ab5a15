"""Scores between query and document vectors for contrastive and graded-pair training."""

from __future__ import annotations

import math

import keras
from keras import ops

OBJECTIVES = ("ranking", "cosine")


def _unit(vectors):
    return vectors / ops.maximum(ops.norm(vectors, axis=-1, keepdims=True), 1e-12)


@keras.saving.register_keras_serializable(package="kbert")
class SimilarityScores(keras.layers.Layer):
    """Cosine similarities of query and document vectors, as the two training losses need them.

    With `objective="ranking"` (multiple-negatives ranking, in-batch
    negatives) it returns `scale * cos(query_i, candidate_j)` for every query
    and every candidate, `[batch, num_candidates]`, where the candidates are
    the batch's documents followed by any hard negatives; the right candidate
    of query `i` is `i`, so softmax cross-entropy against `range(batch)` is the
    loss. With `objective="cosine"` it returns `cos(query_i, document_i)`,
    `[batch]`, for a mean-squared error against graded scores in [0, 1]
    (sentence-transformers' `CosineSimilarityLoss`). The scale is fixed, or
    learned as its logarithm (as CLIP's temperature) when `learn_scale`.

    Args:
        objective: str. `ranking` or `cosine`. Defaults to `ranking`.
        scale: float. Multiplier of the cosine similarities before the
            softmax (sentence-transformers uses 20). Defaults to 20.0.
        learn_scale: bool. Train the scale (its log, starting at
            `log(scale)`, capped at 100 as CLIP does). Defaults to False.
        **kwargs: other keyword arguments passed to `keras.layers.Layer`.

    Example:

    >>> scores = kbert.layers.SimilarityScores("ranking", scale=20.0)
    >>> scores(query_vectors, document_vectors).shape
    (8, 8)

    Reference:
        - [Henderson et al., 2017](https://arxiv.org/abs/1705.00652)
        - [Radford et al., 2021](https://arxiv.org/abs/2103.00020) (learned scale)
    """

    def __init__(self, objective: str = "ranking", scale: float = 20.0, learn_scale: bool = False,
                 **kwargs):
        super().__init__(**kwargs)
        if objective not in OBJECTIVES:
            raise ValueError(f"objective={objective!r}; expected one of {OBJECTIVES}.")
        if scale <= 0:
            raise ValueError(f"scale={scale}; it must be > 0.")
        self.objective = objective
        self.scale = float(scale)
        self.learn_scale = bool(learn_scale)

    def build(self, *shapes):
        if self.learn_scale:
            # Named "bias" so that AdamW leaves it out of weight decay (NO_WEIGHT_DECAY).
            self.log_scale_bias = self.add_weight(
                name="log_scale_bias", shape=(), dtype="float32",
                initializer=keras.initializers.Constant(math.log(self.scale)))
        self.built = True

    def current_scale(self):
        """The scale in use: fixed, or exp of the learned log-scale capped at 100."""
        if not self.learn_scale:
            return ops.convert_to_tensor(self.scale, "float32")
        return ops.minimum(ops.exp(self.log_scale_bias), 100.0)

    def call(self, queries, documents, negatives=None):
        queries, documents = _unit(ops.cast(queries, "float32")), _unit(ops.cast(documents, "float32"))
        if self.objective == "cosine":
            return ops.sum(queries * documents, axis=-1)
        candidates = documents
        if negatives is not None:
            candidates = ops.concatenate([documents, _unit(ops.cast(negatives, "float32"))], axis=0)
        return self.current_scale() * ops.matmul(queries, ops.transpose(candidates))

    def compute_output_spec(self, queries, documents, negatives=None):
        if self.objective == "cosine":
            return keras.KerasTensor((queries.shape[0],), dtype="float32")
        return keras.KerasTensor((queries.shape[0], None), dtype="float32")

    def get_config(self):
        return {**super().get_config(), "objective": self.objective, "scale": self.scale,
                "learn_scale": self.learn_scale}
