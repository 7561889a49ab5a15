"""tf.data featurization: pair packing as run_classifier.py, first-wordpiece labels, dynamic padding."""

import numpy as np
import pytest

from tests.finetune_testing import character_vocabulary
from kbert.data.text_features import TextFeaturizer
from kbert.data.text_features import bucket_boundaries
from kbert.data.text_features import check_max_seq_length
from kbert.data.text_features import classification_dataset
from kbert.data import INPUT_TOKENS
from kbert.data import read_vocab
from kbert.data.text_features import token_classification_dataset

VOCABULARY = character_vocabulary()


def ids(text):
    """Character-vocabulary ids of one word: first char, then ## continuations."""
    return [VOCABULARY.index(text[0])] + [VOCABULARY.index("##" + c) for c in text[1:]]


@pytest.fixture(scope="module")
def featurizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(VOCABULARY) + "\n", encoding="utf-8")
    return TextFeaturizer(str(path), do_lower_case=True)


def _truncate_seq_pair(a, b, max_length):
    # run_classifier.py's reference: drop a token from the longer segment.
    a, b = list(a), list(b)
    while len(a) + len(b) > max_length:
        (a if len(a) > len(b) else b).pop()
    return a, b


@pytest.mark.parametrize("length_a,length_b", [(10, 3), (3, 10), (9, 9), (8, 7), (2, 2)])
def test_pair_packing_matches_run_classifier(featurizer, length_a, length_b):
    text_a, text_b = "a" * length_a, "b" * length_b
    token_ids, segment_ids = featurizer.pack(
        [featurizer.tokenize([text_a]), featurizer.tokenize([text_b])], max_seq_length=12)
    a, b = _truncate_seq_pair(ids(text_a), ids(text_b), 12 - 3)
    cls, sep = VOCABULARY.index("[CLS]"), VOCABULARY.index("[SEP]")
    assert token_ids.to_list()[0] == [cls] + a + [sep] + b + [sep]
    assert segment_ids.to_list()[0] == [0] * (len(a) + 2) + [1] * (len(b) + 1)


def test_classification_batches_pad_to_the_longest_in_batch(featurizer):
    texts = ["ab", "abcdefgh", "abc", "a"]
    dataset = classification_dataset(featurizer, texts, None, [0, 1, 0, 1], batch_size=4,
                                      max_seq_length=64)
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


def test_buckets_separate_short_and_long(featurizer):
    texts = ["a" * 5, "a" * 40, "a" * 6, "a" * 41]
    dataset = classification_dataset(featurizer, texts, None, None, batch_size=2,
                                      max_seq_length=64)
    shapes = sorted(tuple(b["token_ids"].shape) for b in dataset)
    assert shapes == [(2, 8), (2, 43)]
    assert bucket_boundaries(128) == [17, 33, 65, 129]


def test_regression_labels_are_float(featurizer):
    dataset = classification_dataset(featurizer, ["a"], ["b"], [3.8], batch_size=1,
                                     max_seq_length=8, regression=True)
    batch = next(iter(dataset))
    assert batch["label"].dtype.name == "float32"
    assert batch["label"].numpy()[0] == pytest.approx(3.8)
    assert batch["segment_ids"].numpy()[0].tolist() == [0, 0, 0, 1, 1]


def test_token_labels_sit_on_the_first_wordpiece(featurizer):
    words = ["EU", "rejects", "x"]
    dataset = token_classification_dataset(featurizer, [words], [[3, 0, 5]], batch_size=1,
                                           max_seq_length=64)
    batch = next(iter(dataset))
    # [CLS] e ##u r ##e ##j ##e ##c ##t ##s x [SEP]
    assert batch["token_ids"].numpy()[0].tolist() == (
        [VOCABULARY.index("[CLS]")] + ids("eu") + ids("rejects") + ids("x")
        + [VOCABULARY.index("[SEP]")])
    assert batch["weight"].numpy()[0].tolist() == [0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0]
    assert batch["label"].numpy()[0].tolist() == [0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0]
    assert batch["word_position"].numpy()[0].tolist() == [0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 3, 0]


def test_token_labels_truncate_words_past_max_seq_length(featurizer):
    dataset = token_classification_dataset(featurizer, [["abc", "de", "f"]], [[1, 2, 3]],
                                           batch_size=1, max_seq_length=6)
    batch = next(iter(dataset))
    # 4 wordpieces fit: a ##b ##c d; "f" and the rest of "de" are cut.
    assert batch["word_position"].numpy()[0].tolist() == [0, 1, 0, 0, 2, 0]
    assert batch["label"].numpy()[0].tolist() == [0, 1, 0, 0, 2, 0]


def test_vocabulary_and_length_errors(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\nhello\n")
    with pytest.raises(ValueError, match=r"vocab.txt' lacks \[CLS\], \[SEP\]"):
        read_vocab(str(path), INPUT_TOKENS)
    with pytest.raises(FileNotFoundError, match="missing.txt' does not exist"):
        read_vocab(str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError, match=r"max_seq_length=600 is larger than the encoder's 512"):
        check_max_seq_length(600, 512)
