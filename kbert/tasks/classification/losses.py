"""The multi-label loss: each class a binary decision, its positives optionally weighted."""

from __future__ import annotations

from typing import Sequence

import keras
import tensorflow as tf


class MultiLabelCrossentropy(keras.losses.Loss):
    """Binary cross-entropy from logits, averaged over classes, positives weighted per class.

    Keras' `BinaryCrossentropy` has no per-class weight; this is PyTorch's
    `BCEWithLogitsLoss(pos_weight=...)` (`tf.nn.weighted_cross_entropy_with_logits`).
    Without weights it equals `keras.losses.BinaryCrossentropy(from_logits=True)`.

    Args:
        positive_weights: sequence of float or None. Each class's weight on its
            positive term (`ClassificationConfig.class_weights`); None weighs 1.
        **kwargs: passed to `keras.losses.Loss` (`reduction`, `name`).

    Example:

    >>> loss = MultiLabelCrossentropy([1.0, 4.0])
    >>> float(loss([[1.0, 0.0]], [[2.0, -1.0]]))
    0.220...
    """

    def __init__(self, positive_weights: Sequence[float] | None = None,
                 name: str = "multi_label_crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.positive_weights = None if positive_weights is None else [
            float(w) for w in positive_weights]

    def call(self, y_true, y_pred):
        labels = tf.cast(y_true, tf.float32)
        logits = tf.cast(y_pred, tf.float32)
        weights = 1.0 if self.positive_weights is None else tf.constant(self.positive_weights)
        losses = tf.nn.weighted_cross_entropy_with_logits(labels, logits, pos_weight=weights)
        return tf.reduce_mean(losses, axis=-1)

    def get_config(self):
        return {**super().get_config(), "positive_weights": self.positive_weights}
