"""The unigram and majority baselines of held-out pre-training data, by hand.

What word frequencies alone achieve on the eval data's masked positions, against a
numpy count over the training records (masked positions restored, [CLS] and [SEP]
left out) and the eval batches' labels.
"""

import numpy as np
import pytest
import tensorflow as tf

from tests.training.pretraining_data import drop_second_prediction_of_every_third_row
from tests.training.pretraining_data import write_pretraining_data

from kbert.data import pretraining_dataset
from kbert.data.pretraining.baselines import DataBaselines
from kbert.data.pretraining.eval_data import EvalData


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    directory = tmp_path_factory.mktemp("baseline_data")
    train = write_pretraining_data(str(directory / "train.tfrecord"))
    # Rows with 1 or 2 real masked positions: the weights count, not the slots.
    heldout = write_pretraining_data(str(directory / "heldout.tfrecord"), num_examples=30, seed=1)
    drop_second_prediction_of_every_third_row(heldout)
    return train, heldout


def test_unigram_and_majority_baselines_by_hand(data):
    train, heldout = data
    counts = np.zeros(99)
    nsp = []
    for record in tf.data.TFRecordDataset(train).as_numpy_iterator():
        feature = tf.train.Example.FromString(record).features.feature
        ids = list(feature["input_ids"].int64_list.value)
        for position, label, weight in zip(feature["masked_lm_positions"].int64_list.value,
                                           feature["masked_lm_ids"].int64_list.value,
                                           feature["masked_lm_weights"].float_list.value):
            if weight:
                ids[position] = label
        for token, real in zip(ids, feature["input_mask"].int64_list.value):
            if real and token not in (2, 3):  # [CLS] and [SEP]
                counts[token] += 1
        nsp.append(feature["next_sentence_labels"].int64_list.value[0])
    probability = (counts + 1) / (counts.sum() + 99)
    labels, label_weights, nsp_labels = [], [], []
    for _, y, w in pretraining_dataset(heldout, 30, 16, 3, is_training=False).as_numpy_iterator():
        labels.append(y["mlm"].ravel())
        label_weights.append(w["mlm"].ravel())
        nsp_labels.append(y["nsp"].ravel())
    labels, label_weights = np.concatenate(labels), np.concatenate(label_weights)
    majority = int(np.bincount(nsp).argmax())
    baselines = DataBaselines.compute([train], EvalData.from_files(heldout, 16, 3, None), 99,
                                      next_sentence=True)
    assert baselines.unigram_instances == 64
    np.testing.assert_allclose(baselines.unigram_masked_lm_loss,
                               -(np.log(probability[labels]) * label_weights).sum()
                               / label_weights.sum(), rtol=1e-9)
    assert baselines.unigram_masked_lm_accuracy == pytest.approx(
        ((labels == counts.argmax()) * label_weights).sum() / label_weights.sum())
    assert baselines.majority_next_sentence_accuracy == pytest.approx(
        np.mean(np.concatenate(nsp_labels) == majority))
