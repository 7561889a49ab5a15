"""Fusing re-ranker scores with the first stage: hand-worked RRF and interpolation, bad settings."""

import numpy as np
import pytest

from kbert.retrieval.fusion import fuse_scores


def test_none_is_the_cross_encoder_alone():
    np.testing.assert_array_equal(fuse_scores([0.9, 0.5], [-1.0, 2.0], "none"), [-1.0, 2.0])


def test_rrf_by_hand():
    # First-stage ranks 1, 2, 3; cross-encoder ranks 3, 1, 2 (scores 0, 2, 1).
    fused = fuse_scores([0.9, 0.8, 0.1], [0.0, 2.0, 1.0], "rrf", rrf_k=1)
    np.testing.assert_allclose(fused, [1 / 2 + 1 / 4, 1 / 3 + 1 / 2, 1 / 4 + 1 / 3])
    # With k = 60 the default, a document first in both lists wins.
    fused = fuse_scores([3.0, 2.0, 1.0], [5.0, 1.0, 3.0], "rrf")
    np.testing.assert_allclose(fused, [2 / 61, 1 / 62 + 1 / 63, 1 / 63 + 1 / 62])


def test_rrf_ties_in_the_cross_encoder_keep_the_first_stage_order():
    np.testing.assert_allclose(fuse_scores([3.0, 2.0], [1.0, 1.0], "rrf", rrf_k=0), [2.0, 1.0])


def test_interpolate_mixes_z_scores():
    first, cross = [1.0, 0.0, -1.0], [0.0, 10.0, 20.0]  # z: [1.2247, 0, -1.2247] and [-1.2247, 0, 1.2247]
    z = np.sqrt(1.5)
    np.testing.assert_allclose(fuse_scores(first, cross, "interpolate", weight=0.25),
                               [0.75 * z - 0.25 * z, 0.0, -0.75 * z + 0.25 * z])
    np.testing.assert_allclose(fuse_scores(first, cross, "interpolate", weight=1.0), [-z, 0.0, z])
    # A constant list carries no order: the other one decides.
    np.testing.assert_allclose(fuse_scores([2.0, 2.0], [1.0, 3.0], "interpolate", weight=0.5), [-0.5, 0.5])


@pytest.mark.parametrize("fusion,weight,message", [
    ("borda", 0.5, "--rerank_fusion='borda'"), ("interpolate", 1.5, "--rerank_fusion_weight=1.5")])
def test_bad_settings_are_named(fusion, weight, message):
    with pytest.raises(ValueError, match=message):
        fuse_scores([1.0], [1.0], fusion, weight)


def test_lengths_must_match():
    with pytest.raises(ValueError, match="2 first-stage scores but 1"):
        fuse_scores([1.0, 0.5], [1.0], "rrf")
