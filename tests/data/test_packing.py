"""Sequence packing in tf.data: first-fit decreasing, every instance kept whole, padding removed."""

import numpy as np
import pytest
import tensorflow as tf

from kbert.data import PackingConfig
from kbert.data import create_pretraining_data
from kbert.data import first_fit_decreasing
from kbert.data import pack_window
from kbert.data import pretraining_dataset
from tests.data.conftest import PERSUASION


def test_first_fit_decreasing_places_longest_first_within_every_limit():
    lengths = tf.constant([5, 3, 4, 8, 2, 2, 1])
    predictions = tf.constant([1, 1, 1, 2, 1, 1, 1])
    fit = {k: v.numpy() for k, v in first_fit_decreasing(lengths, predictions, 8, 3, 3).items()}
    # 8 | 5 3 | 4 2 2 | 1: longest first, each into the first row with room.
    assert fit["row"].tolist() == [1, 1, 2, 0, 2, 2, 3]
    assert fit["offset"].tolist() == [0, 5, 0, 0, 4, 6, 0]
    assert fit["slot"].tolist() == [0, 1, 0, 0, 1, 2, 0]
    assert fit["prediction_offset"].tolist() == [0, 1, 0, 0, 1, 2, 0]
    assert int(fit["num_rows"]) == 4


def test_pack_window_moves_tokens_predictions_and_labels():
    window = {
        "token_ids": tf.constant([[2, 7, 3, 0], [2, 8, 9, 3]]),
        "label": tf.constant([[0], [1]]),
        "mask_positions": tf.constant([[1, 0], [1, 2]]),
    }
    rows = pack_window(window, tf.constant([3, 4]), 8, 2, sequence_keys=("token_ids",),
                       instance_keys=("label",), prediction_keys=("mask_positions",),
                       position_key="mask_positions", max_predictions=4,
                       prediction_counts=tf.constant([1, 2]))
    rows = {k: v.numpy().tolist() for k, v in rows.items()}
    assert rows["token_ids"] == [[2, 8, 9, 3, 2, 7, 3, 0]]
    assert rows["instance_ids"] == [[1, 1, 1, 1, 2, 2, 2, 0]]
    assert rows["position_ids"] == [[0, 1, 2, 3, 0, 1, 2, 0]]
    assert rows["label"] == [[1, 0]] and rows["instance_positions"] == [[0, 4]]
    assert rows["instance_weights"] == [[1.0, 1.0]]
    assert rows["mask_positions"] == [[1, 2, 5, 0]]
    assert rows["prediction_weights"] == [[1.0, 1.0, 1.0, 0.0]]


@pytest.fixture(scope="module")
def static_file(tmp_path_factory, vocab_file):
    path = str(tmp_path_factory.mktemp("packing") / "train.tfrecord")
    # short_seq_prob=0.5: many short instances, as at max_seq_length 512 on real corpora.
    create_pretraining_data(PERSUASION, path, vocab_file, max_seq_length=64,
                            max_predictions_per_seq=10, dupe_factor=1, short_seq_prob=0.5,
                            num_workers=1)
    return path


def _instances(features, labels, weights, packed):
    """Each instance of a batch as (tokens, segments, masked positions, labels, nsp), positions relative."""
    found = []
    for r in range(features["token_ids"].shape[0]):
        ids, segments = features["token_ids"][r].numpy(), features["segment_ids"][r].numpy()
        positions = features["mask_positions"][r].numpy()
        chosen = weights["mlm"][r].numpy() > 0
        if not packed:
            n = int(features["padding_mask"][r].numpy().sum())
            found.append((tuple(ids[:n]), tuple(segments[:n]), tuple(positions[chosen]),
                          tuple(labels["mlm"][r].numpy()[chosen]), int(labels["nsp"][r, 0])))
            continue
        instance_ids = features["instance_ids"][r].numpy()
        for slot in range(labels["nsp"].shape[1]):
            if weights["nsp"][r, slot] == 0:
                continue
            start = int(features["cls_positions"][r, slot])
            span = np.nonzero(instance_ids == slot + 1)[0]
            assert span[0] == start and (np.diff(span) == 1).all()
            assert (features["position_ids"][r].numpy()[span] == np.arange(len(span))).all()
            mine = chosen & (positions >= span[0]) & (positions <= span[-1])
            found.append((tuple(ids[span]), tuple(segments[span]), tuple(positions[mine] - start),
                          tuple(labels["mlm"][r].numpy()[mine]), int(labels["nsp"][r, slot])))
    return found


def test_packed_rows_hold_every_instance_whole_with_less_padding(static_file):
    plain = pretraining_dataset(static_file, 16, 64, 10, is_training=False)
    packing = PackingConfig(max_instances_per_row=3, window_size=64)
    packed = pretraining_dataset(static_file, 16, 64, 10, is_training=False, packing=packing)
    plain_instances, packed_instances, padding = [], [], {"plain": [], "packed": []}
    for batch in plain:
        plain_instances += _instances(*batch, packed=False)
        padding["plain"].append(batch[0]["padding_mask"].numpy())
    for batch in packed:
        packed_instances += _instances(*batch, packed=True)
        padding["packed"].append(batch[0]["padding_mask"].numpy())
        assert batch[0]["mask_positions"].shape[1] == 13  # 10 + 3 instances
        assert (batch[0]["instance_ids"].numpy().max(axis=1) <= 3).all()
    assert sorted(packed_instances) == sorted(plain_instances)
    fraction = {k: 1 - np.concatenate(v).mean() for k, v in padding.items()}
    # Rows of 64 hold at most one instance longer than 32: some padding stays.
    assert fraction["plain"] > 0.2 and fraction["packed"] < 0.75 * fraction["plain"]


def test_packing_data_of_another_length_is_refused(static_file):
    with pytest.raises(ValueError, match=r"packing rows of max_seq_length=128, but "
                                         r".*train.tfrecord.meta.json records max_seq_length=64; "
                                         r"pass max_seq_length=64"):
        pretraining_dataset(static_file, 16, 128, 10, packing=PackingConfig())


@pytest.mark.parametrize("settings, message", [
    (dict(max_instances_per_row=0), r"max_instances_per_row=0 must be at least 1"),
    (dict(window_size=0), r"window_size=0 must be at least 1"),
    (dict(max_predictions_per_row=0), r"max_predictions_per_row=0 must be at least 1"),
])
def test_bad_packing_settings_are_named(settings, message):
    with pytest.raises(ValueError, match=message):
        PackingConfig(**settings).validate()
