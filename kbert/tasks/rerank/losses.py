"""The listwise softmax loss of a cross-encoder over groups of one positive and k negatives."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="kbert")
class ListwiseSoftmaxLoss(keras.losses.Loss):
    """Softmax cross-entropy of each group's scores, the positive being the group's first row.

    The cross-encoder scores `batch * group_size` (query, document) rows laid
    out group by group; each group is one positive followed by its negatives.
    Keras losses see rows, not groups, hence this class (the loss of
    Nogueira & Cho's and most re-rankers' "localized contrastive" training).

    Args:
        group_size: int. Rows per group (1 + negatives).
        **kwargs: passed to `keras.losses.Loss`.

    Example:

    >>> loss = ListwiseSoftmaxLoss(group_size=5)
    >>> loss(labels, scores)  # scores [batch * 5, 1]; labels are ignored
    """

    def __init__(self, group_size: int, name: str = "listwise_softmax", **kwargs):
        super().__init__(name=name, **kwargs)
        if group_size < 2:
            raise ValueError(f"group_size={group_size}; a group needs a positive and >= 1 negative.")
        self.group_size = group_size

    def call(self, y_true, y_pred):
        logits = ops.reshape(ops.cast(y_pred, "float32"), (-1, self.group_size))
        return -ops.log_softmax(logits, axis=-1)[:, 0]

    def get_config(self):
        return {**super().get_config(), "group_size": self.group_size}
