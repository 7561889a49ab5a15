"""SentencePooling and SimilarityScores against hand computations and a numpy loss."""

import keras
import numpy as np
import pytest

from kbert.layers import SentencePooling
from kbert.layers import SimilarityScores

# Two texts, three positions, two dimensions; text 1 has one padding position.
SEQUENCE = np.array([[[1.0, 2.0], [3.0, 4.0], [5.0, -6.0]],
                     [[2.0, 0.0], [0.0, 2.0], [100.0, 100.0]]], "float32")
MASK = np.array([[1, 1, 1], [1, 1, 0]], "int32")


@pytest.mark.parametrize("mode, expected", [
    ("mean", [[3.0, 0.0], [1.0, 1.0]]),   # (1+3+5)/3, (2+4-6)/3; padding row ignored
    ("cls", [[1.0, 2.0], [2.0, 0.0]]),
    ("max", [[5.0, 4.0], [2.0, 2.0]]),    # padding's 100 never wins
])
def test_pooling_modes_match_hand_computation(mode, expected):
    pooled = SentencePooling(mode)(SEQUENCE, MASK)
    np.testing.assert_allclose(pooled, expected, rtol=1e-6)


def test_normalize_divides_by_the_l2_norm():
    pooled = np.asarray(SentencePooling("mean", normalize=True)(SEQUENCE, MASK))
    np.testing.assert_allclose(pooled, [[1.0, 0.0], [1 / np.sqrt(2), 1 / np.sqrt(2)]], rtol=1e-6)


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="pooling='sum'"):
        SentencePooling("sum")


def test_pooling_config_round_trip():
    layer = SentencePooling("max", normalize=True)
    assert SentencePooling.from_config(layer.get_config()).get_config() == layer.get_config()


def _numpy_ranking_loss(queries, documents, negatives, scale):
    """sentence-transformers' MultipleNegativesRankingLoss, written out in numpy."""
    def unit(x):
        return x / np.linalg.norm(x, axis=1, keepdims=True)
    candidates = np.concatenate([documents, negatives]) if negatives is not None else documents
    scores = scale * unit(queries) @ unit(candidates).T
    scores -= scores.max(axis=1, keepdims=True)
    log_softmax = scores - np.log(np.exp(scores).sum(axis=1, keepdims=True))
    return -np.mean([log_softmax[i, i] for i in range(len(queries))])


@pytest.mark.parametrize("with_negatives", [False, True])
def test_ranking_scores_with_cross_entropy_equal_numpy_loss(with_negatives):
    rng = np.random.default_rng(0)
    queries, documents = rng.normal(size=(4, 5)), rng.normal(size=(4, 5))
    negatives = rng.normal(size=(4, 5)) if with_negatives else None
    scores = SimilarityScores("ranking", scale=20.0)(queries.astype("float32"), documents.astype("float32"),
                                                     None if negatives is None else negatives.astype("float32"))
    assert scores.shape == (4, 8 if with_negatives else 4)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(np.arange(4), scores)
    np.testing.assert_allclose(float(loss), _numpy_ranking_loss(queries, documents, negatives, 20.0), rtol=1e-5)


def test_cosine_objective_gives_pairwise_cosines():
    queries = np.array([[3.0, 4.0], [1.0, 0.0]], "float32")
    documents = np.array([[3.0, 4.0], [0.0, 2.0]], "float32")
    np.testing.assert_allclose(SimilarityScores("cosine")(queries, documents), [1.0, 0.0], atol=1e-6)


def test_learned_scale_starts_at_scale_and_is_trainable():
    layer = SimilarityScores("ranking", scale=20.0, learn_scale=True)
    layer(np.ones((2, 3), "float32"), np.ones((2, 3), "float32"))
    assert [w.name for w in layer.trainable_weights] == ["log_scale_bias"]
    np.testing.assert_allclose(float(layer.current_scale()), 20.0, rtol=1e-6)
