"""The multi-label loss against Keras' binary cross-entropy and a hand-worked weighted value."""

import keras
import numpy as np
import pytest

from kbert.tasks.classification.losses import MultiLabelCrossentropy

LABELS = np.array([[0.0, 1.0], [1.0, 1.0]], np.float32)
LOGITS = np.array([[2.0, -1.0], [0.5, 3.0]], np.float32)


def test_unweighted_it_is_keras_binary_cross_entropy():
    expected = keras.losses.BinaryCrossentropy(from_logits=True)(LABELS, LOGITS)
    assert float(MultiLabelCrossentropy()(LABELS, LOGITS)) == pytest.approx(float(expected),
                                                                             rel=1e-6)


def test_positive_weights_scale_only_the_positive_terms():
    # Example 1: class 0 negative, logit 2 -> log(1 + e^2); class 1 positive, weight 4,
    # logit -1 -> 4 log(1 + e^1); mean over the two classes.
    value = MultiLabelCrossentropy([1.0, 4.0])(LABELS[:1], LOGITS[:1])
    assert float(value) == pytest.approx((np.log1p(np.e ** 2) + 4 * np.log1p(np.e)) / 2, rel=1e-6)
    assert MultiLabelCrossentropy.from_config(
        MultiLabelCrossentropy([1.0, 4.0]).get_config()).positive_weights == [1.0, 4.0]
