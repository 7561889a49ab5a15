"""Classification batches: packed in tf.data, bucketed by length, padded per batch."""

import numpy as np
import pytest

from tests.finetune_testing import character_vocabulary
from kbert.data import TextPreprocessor
from kbert.data import bucket_boundaries
from kbert.data import classification_dataset

VOCABULARY = character_vocabulary()


def ids(text):
    """Character-vocabulary ids of one word: first char, then ## continuations."""
    return [VOCABULARY.index(text[0])] + [VOCABULARY.index("##" + c) for c in text[1:]]


def preprocessor(max_seq_length):
    return TextPreprocessor.from_vocabulary(VOCABULARY, True, max_seq_length)


@pytest.fixture(scope="module")
def preprocessor_64():
    return preprocessor(64)


def test_classification_batches_pad_to_the_longest_in_batch(preprocessor_64):
    texts = ["ab", "abcdefgh", "abc", "a"]
    dataset = classification_dataset(preprocessor_64, texts, None, [0, 1, 0, 1], batch_size=4)
    batches = list(dataset)
    assert len(batches) == 1  # all in the bucket of length < 17
    batch = batches[0]
    order = batch["example_index"].numpy()
    # Padded to 8 + 2 specials, not to max_seq_length=64.
    assert batch["token_ids"].shape == (4, 10)
    lengths = batch["padding_mask"].numpy().sum(axis=1)
    np.testing.assert_array_equal(lengths, [len(texts[i]) + 2 for i in order])
    np.testing.assert_array_equal(batch["label"].numpy(), [[0, 1, 0, 1][i] for i in order])
    assert batch["token_ids"].numpy()[list(order).index(0)].tolist()[:4] == (
        [VOCABULARY.index("[CLS]")] + ids("ab") + [VOCABULARY.index("[SEP]")])


def test_buckets_separate_short_and_long(preprocessor_64):
    texts = ["a" * 5, "a" * 40, "a" * 6, "a" * 41]
    dataset = classification_dataset(preprocessor_64, texts, None, None, batch_size=2)
    shapes = sorted(tuple(b["token_ids"].shape) for b in dataset)
    assert shapes == [(2, 8), (2, 43)]
    assert bucket_boundaries(128) == [17, 33, 65, 129]


def test_regression_labels_are_float(preprocessor_64):
    dataset = classification_dataset(preprocessor_64, ["a"], ["b"], [3.8], batch_size=1,
                                     regression=True)
    batch = next(iter(dataset))
    assert batch["label"].dtype.name == "float32"
    assert batch["label"].numpy()[0] == pytest.approx(3.8)
    assert batch["segment_ids"].numpy()[0].tolist() == [0, 0, 0, 1, 1]
