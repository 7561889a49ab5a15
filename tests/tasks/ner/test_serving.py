"""NER serving: words found again after tokenization, with their original text."""

import tensorflow as tf

from tests.serving_testlib import VOCAB
from kbert.data import TextPreprocessor
from kbert.data import read_vocab
from kbert.tasks.ner.serving import tokenize_words


def test_words_keep_original_text_and_first_pieces():
    text = "Naïve café, Zürich gorgeousness"
    long_enough = TextPreprocessor(read_vocab(VOCAB), do_lower_case=True, max_seq_length=40)
    inputs, positions, words = tokenize_words(long_enough, tf.constant([text, ""]))
    assert [w.decode() for w in words[0].numpy()] == ["Naïve", "café", ",", "Zürich", "gorgeousness"]
    assert words[1].numpy().tolist() == []
    token_ids = inputs["token_ids"].numpy()[0]
    starts = positions[0].numpy().tolist()
    vocab = read_vocab(VOCAB)
    pieces = [vocab[t] for t in token_ids[1:inputs["padding_mask"].numpy()[0].sum() - 1]]
    assert [p for p in range(1, len(pieces) + 1) if not pieces[p - 1].startswith("##")] == starts
    # With 12 positions only the words whose first piece fits are kept.
    short = TextPreprocessor(read_vocab(VOCAB), do_lower_case=True, max_seq_length=12)
    _, positions, words = tokenize_words(short, tf.constant([text]))
    assert [w.decode() for w in words[0].numpy()] == ["Naïve", "café", ","]
    assert positions[0].numpy().max() <= 10
