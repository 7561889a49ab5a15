"""One word rule for NER: fine-tuning's CoNLL words are the words serving finds in text."""

import os
import re
import sys
import unicodedata

import pytest
import tensorflow as tf

from tests.serving_testlib import REPO
from tests.serving_testlib import VOCAB
from kbert.data import TextPreprocessor
from kbert.data import read_vocab
from kbert.data.words import split_words
from kbert.data.words import word_pieces
from kbert.data.words import word_spans
from kbert.tasks.token_classification.dataset import token_classification_dataset
from kbert.tasks.token_classification.conll import read_conll
from kbert.tasks.token_classification.serving import word_windows

CONLL = os.path.join(REPO, "tests", "testdata", "finetune", "conll2003")


def test_split_words_splits_exactly_where_str_split_does_on_every_code_point():
    # Every code point between two letters: one word, or two when str.split() splits there.
    code_points = [c for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
    texts = [f"a{chr(c)}b" for c in code_points]
    found = split_words(tf.constant(texts)).row_lengths().numpy()
    expected = [len(text.split()) for text in texts]
    wrong = [hex(c) for c, got, want in zip(code_points, found, expected) if got != want]
    assert wrong == []
    assert sum(want == 2 for want in expected) == 29  # Python 3.11's whitespace characters


def test_punctuation_splits_alike_in_the_graph_and_in_python_on_every_code_point():
    # Between two letters, a punctuation character is a word of its own (3 words). Code points
    # Python 3.11's Unicode 14 leaves unassigned are skipped: TensorFlow's RE2 knows a newer
    # Unicode, where a few of them are punctuation.
    code_points = [c for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF
                   and unicodedata.category(chr(c)) != "Cn"]
    texts = [f"a{chr(c)}b" for c in code_points]
    found = split_words(tf.constant(texts), split_punctuation=True).row_lengths().numpy()
    expected = [len(word_spans(text, split_punctuation=True)) for text in texts]
    wrong = [hex(c) for c, got, want in zip(code_points, found, expected) if got != want]
    assert wrong == []
    # ASCII's 32 punctuation and symbol characters, and Unicode 14's 796 others of category P.
    assert sum(want == 3 for want in expected) == 32 + 796
    text = "O'Neil (IBM) flew to São Paulo, via the U.S.\u3000on 1996-08-22."
    spans = word_spans(text, split_punctuation=True)
    assert split_words(tf.constant([text]), True).to_list() == [
        [text[a:b].encode() for a, b in spans]]
    assert [text[a:b] for a, b in spans][:6] == ["O", "'", "Neil", "(", "IBM", ")"]
    assert word_spans(text) == [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


def test_split_words_keeps_words_whole_and_drops_empty_ones():
    texts = ["U.S. troops  left\u00a0on\t1996-08-22 ,\u3000O'Neil said .\n", "", " \t\n "]
    assert split_words(tf.constant(texts)).to_list() == [
        [w.encode() for w in texts[0].split()], [], []]


def _conll_sentences():
    sentences = []
    for name in ("train.txt", "valid.txt", "test.txt"):
        sentences += read_conll(os.path.join(CONLL, name))
    return sentences


def test_conll_sentences_get_the_same_pieces_in_fine_tuning_and_serving():
    sentences = _conll_sentences()
    words = [w for s in sentences for w in s.words]
    # Words with inner punctuation, which BERT's basic tokenizer would split into several.
    assert {"1996-08-30", "all-rounder", "rain-affected"} <= set(words)
    preprocessor = TextPreprocessor.from_vocab_file(VOCAB, True, 512)
    texts = [" ".join(s.words) for s in sentences]

    # Serving: raw text split on whitespace, packed into windows (one per sentence here).
    split = split_words(tf.constant(texts))
    assert split.to_list() == [[w.encode() for w in s.words] for s in sentences]
    windows = word_windows(preprocessor, split, window_stride=255)
    assert windows["example"].numpy().tolist() == list(range(len(sentences)))
    served_ids = windows["token_ids"].to_list()
    served_first = [[i + 1 for i, tagged in enumerate(row) if tagged] for row in windows["tagged"].to_list()]

    # Fine-tuning: the CoNLL word lists, through the training dataset.
    tags = [[0] * len(s.words) for s in sentences]
    trained_ids, trained_first = {}, {}
    for batch in token_classification_dataset(preprocessor, [s.words for s in sentences], tags, 4):
        for row, index in enumerate(batch["example_index"].numpy()):
            length = batch["padding_mask"].numpy()[row].sum()
            trained_ids[index] = batch["token_ids"].numpy()[row][:length].tolist()
            positions = batch["word_position"].numpy()[row][:length]
            trained_first[index] = [p for p in range(length) if positions[p]]
            assert positions[trained_first[index]].tolist() == list(range(1, len(trained_first[index]) + 1))
    assert len(trained_ids) == len(sentences)
    for index, sentence in enumerate(sentences):
        assert served_ids[index] == trained_ids[index], sentence.words
        assert served_first[index] == trained_first[index], sentence.words
        assert len(served_first[index]) == len(sentence.words)


def test_word_pieces_of_a_word_without_pieces_and_of_empty_rows():
    preprocessor = TextPreprocessor.from_vocab_file(VOCAB, True, 16)
    vocab = read_vocab(VOCAB)
    # "\x00" is removed by BERT's normalization: a word with no pieces.
    words = tf.ragged.constant([["EU", "\x00", "rejects"], [], ["x"]])
    pieces, first, word = word_pieces(preprocessor, words)
    assert [[vocab[i] for i in row] for row in pieces.to_list()] == [
        ["e", "##u", "re", "##j", "##e", "##c", "##t", "##s"], [], ["x"]]
    assert first.to_list() == [[True, False, True, False, False, False, False, False], [], [True]]
    assert word.to_list() == [[0, 0, 2, 2, 2, 2, 2, 2], [], [0]]


def test_byte_level_bpe_words_get_the_pieces_of_running_text():
    # Each word is tokenized after a space ("Ġworld"), so its pieces are those
    # the `tokenizers` library gives it after a space in a sentence.
    from tokenizers import Tokenizer

    tokenizer_json = os.path.join(REPO, "tests", "testdata", "bpe_tokenizer.json")
    preprocessor = TextPreprocessor.from_tokenizer_json(tokenizer_json, max_seq_length=16)
    hf = Tokenizer.from_file(tokenizer_json)
    words = ["EU", "rejects", "German", "call", "."]
    pieces, first, word = word_pieces(preprocessor, tf.ragged.constant([words]))
    expected = [hf.encode(" " + w, add_special_tokens=False).ids for w in words]
    assert pieces.to_list() == [[i for ids in expected for i in ids]]
    assert first.to_list() == [[i == 0 for ids in expected for i in range(len(ids))]]
    assert word.to_list() == [[w for w, ids in enumerate(expected) for _ in ids]]
    assert hf.id_to_token(expected[1][0]).startswith("Ġ")
