"""A dual encoder (bi-encoder): query and document towers scored against each other for training."""

from __future__ import annotations

import keras

from kbert.layers.similarity_scores import SimilarityScores
from kbert.models.bert_sentence_encoder import BertSentenceEncoder

SIDES = ("query", "document", "negative")
INPUTS = ("token_ids", "segment_ids", "padding_mask")


def side_inputs(inputs: dict, side: str) -> dict:
    """The three encoder inputs of one side (`query_token_ids` -> `token_ids`, ...)."""
    return {name: inputs[f"{side}_{name}"] for name in INPUTS}


@keras.saving.register_keras_serializable(package="kbert")
class BertDualEncoder(keras.Model):
    """Two `BertSentenceEncoder` towers (or one shared) and the scores their training needs.

    Inputs are a flat dict: `query_token_ids`, `query_segment_ids`,
    `query_padding_mask`, the same for `document_`, and with
    `num_negatives > 0` for `negative_` (`batch * num_negatives` rows, the
    hard negatives of query 0 first). The output is `SimilarityScores`:
    `[batch, batch * (1 + num_negatives)]` scaled cosine similarities for the
    multiple-negatives ranking loss (`objective="ranking"`, labels
    `range(batch)`), or `[batch]` cosine similarities for graded pairs
    (`objective="cosine"`). At inference the towers are used alone
    (`query_tower`, `document_tower`).

    Args:
        query_tower: `BertSentenceEncoder`.
        document_tower: `BertSentenceEncoder` or None. None shares the query
            tower (one set of weights for both sides).
        objective: str. `ranking` or `cosine`. Defaults to `ranking`.
        scale: float. Similarity scale of the ranking loss. Defaults to 20.0.
        learn_scale: bool. Learn the scale. Defaults to False.
        num_negatives: int. Hard negatives per query in each batch. Defaults to 0.
        **kwargs: other keyword arguments passed to `keras.Model`.

    Example:

    >>> tower = kbert.models.BertSentenceEncoder(encoder)
    >>> model = kbert.models.BertDualEncoder(tower)
    >>> model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    Reference:
        - [Karpukhin et al., 2020](https://arxiv.org/abs/2004.04906) (DPR)
    """

    def __init__(self, query_tower: BertSentenceEncoder,
                 document_tower: BertSentenceEncoder | None = None, objective: str = "ranking",
                 scale: float = 20.0, learn_scale: bool = False, num_negatives: int = 0,
                 **kwargs):
        if num_negatives < 0:
            raise ValueError(f"num_negatives={num_negatives}; it must be >= 0.")
        if num_negatives and objective != "ranking":
            raise ValueError("hard negatives need objective='ranking'; graded pairs "
                             "(objective='cosine') have none.")
        documents = document_tower if document_tower is not None else query_tower
        if documents.dimension != query_tower.dimension:
            raise ValueError(f"the towers' vectors differ in length: query {query_tower.dimension}, "
                             f"document {documents.dimension}.")
        self.query_tower = query_tower
        self.document_tower = documents
        self.encoder = query_tower.encoder
        self.scores = SimilarityScores(objective, scale, learn_scale, name="similarity_scores")
        sides = SIDES if num_negatives else SIDES[:2]
        inputs = {f"{side}_{name}": keras.Input(shape=(None,), dtype="int32", name=f"{side}_{name}")
                  for side in sides for name in INPUTS}
        vectors = [query_tower(side_inputs(inputs, "query"))]
        vectors += [documents(side_inputs(inputs, side)) for side in sides[1:]]
        super().__init__(inputs=inputs, outputs=self.scores(*vectors), **kwargs)
        self.shared = document_tower is None or document_tower is query_tower
        self.objective = objective
        self.scale = float(scale)
        self.learn_scale = bool(learn_scale)
        self.num_negatives = int(num_negatives)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "query_tower": keras.saving.serialize_keras_object(self.query_tower),
            "document_tower": (None if self.shared
                               else keras.saving.serialize_keras_object(self.document_tower)),
            "objective": self.objective,
            "scale": self.scale,
            "learn_scale": self.learn_scale,
            "num_negatives": self.num_negatives,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("query_tower", "document_tower"):
            if isinstance(config.get(key), dict):
                config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)
