"""NER batches: one label per word, on its first wordpiece."""


from tests.finetune_testing import character_vocabulary
from kbert.data import TextPreprocessor
from kbert.tasks.token_classification.dataset import token_classification_dataset

VOCABULARY = character_vocabulary()


def ids(text):
    """Character-vocabulary ids of one word: first char, then ## continuations."""
    return [VOCABULARY.index(text[0])] + [VOCABULARY.index("##" + c) for c in text[1:]]


def preprocessor(max_seq_length):
    return TextPreprocessor.from_vocabulary(VOCABULARY, True, max_seq_length)


def test_token_labels_sit_on_the_first_wordpiece():
    words = ["EU", "rejects", "x"]
    dataset = token_classification_dataset(preprocessor(64), [words], [[3, 0, 5]], batch_size=1)
    batch = next(iter(dataset))
    # [CLS] e ##u r ##e ##j ##e ##c ##t ##s x [SEP]
    assert batch["token_ids"].numpy()[0].tolist() == (
        [VOCABULARY.index("[CLS]")] + ids("eu") + ids("rejects") + ids("x")
        + [VOCABULARY.index("[SEP]")])
    assert batch["weight"].numpy()[0].tolist() == [0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0]
    assert batch["label"].numpy()[0].tolist() == [0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0]
    assert batch["word_position"].numpy()[0].tolist() == [0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 3, 0]


def test_token_labels_truncate_words_past_max_seq_length():
    dataset = token_classification_dataset(preprocessor(6), [["abc", "de", "f"]], [[1, 2, 3]],
                                           batch_size=1)
    batch = next(iter(dataset))
    # 4 wordpieces fit: a ##b ##c d; "f" and the rest of "de" are cut.
    assert batch["word_position"].numpy()[0].tolist() == [0, 1, 0, 0, 2, 0]
    assert batch["label"].numpy()[0].tolist() == [0, 1, 0, 0, 2, 0]
