"""In-graph tokenization and packing agree with Hugging Face `tokenizers` and google-research/bert rules."""

import numpy as np
import pytest
import tensorflow as tf

from tests.serving_testlib import PAIRS
from tests.serving_testlib import TEXTS
from tests.serving_testlib import VOCAB
from tests.serving_testlib import hf_tokenizer
from tests.serving_testlib import reference_inputs

from kbert.data import read_vocab
from kbert.export.text_preprocessing import TextPreprocessor


@pytest.fixture(scope="module")
def preprocessor():
    return TextPreprocessor(read_vocab(VOCAB), do_lower_case=True, max_seq_length=12)


def test_tokenize_matches_hugging_face(preprocessor):
    tokenizer = hf_tokenizer()
    pieces = preprocessor.tokenize(tf.constant(TEXTS + [""]))
    for i, text in enumerate(TEXTS + [""]):
        assert pieces[i].numpy().tolist() == tokenizer.encode(text, add_special_tokens=False).ids


def test_invalid_utf8_is_dropped_not_an_error(preprocessor):
    raw = b"bad \xff\xfe by\xc3tes"
    pieces = preprocessor.tokenize(tf.constant([raw]))
    expected = hf_tokenizer().encode(raw.decode("utf-8", "ignore"), add_special_tokens=False).ids
    assert pieces[0].numpy().tolist() == expected == [2919, 2011, 2618, 2015]


@pytest.mark.parametrize("pairs", [None, PAIRS])
def test_pack_truncates_like_google_bert(preprocessor, pairs):
    tokenize = preprocessor.tokenize
    segments = [tokenize(tf.constant(TEXTS))] + ([tokenize(tf.constant(pairs))] if pairs else [])
    packed = {key: value.numpy() for key, value in preprocessor.pack(segments).items()}
    expected = reference_inputs(TEXTS, pairs, 12)
    for key in expected:
        np.testing.assert_array_equal(packed[key], expected[key], err_msg=key)
    assert packed["token_ids"].shape[1] == 12  # the longest row is truncated to max_seq_length


def test_words_keep_original_text_and_first_pieces(preprocessor):
    text = "Naïve café, Zürich gorgeousness"
    long_enough = TextPreprocessor(read_vocab(VOCAB), do_lower_case=True, max_seq_length=40)
    inputs, positions, words = long_enough.words(tf.constant([text, ""]))
    assert [w.decode() for w in words[0].numpy()] == ["Naïve", "café", ",", "Zürich", "gorgeousness"]
    assert words[1].numpy().tolist() == []
    token_ids = inputs["token_ids"].numpy()[0]
    starts = positions[0].numpy().tolist()
    vocab = read_vocab(VOCAB)
    pieces = [vocab[t] for t in token_ids[1:inputs["padding_mask"].numpy()[0].sum() - 1]]
    assert [p for p in range(1, len(pieces) + 1) if not pieces[p - 1].startswith("##")] == starts
    # With 12 positions only the words whose first piece fits are kept.
    _, positions, words = preprocessor.words(tf.constant([text]))
    assert [w.decode() for w in words[0].numpy()] == ["Naïve", "café", ","]
    assert positions[0].numpy().max() <= 10


def _run_squad_spans(num_pieces, max_tokens, doc_stride):
    spans, start = [], 0
    while start < num_pieces:  # run_squad.py's loop
        length = min(num_pieces - start, max_tokens)
        spans.append((start, length))
        if start + length == num_pieces:
            break
        start += min(length, doc_stride)
    return spans or [(0, 0)]


@pytest.mark.parametrize("doc_stride", [2, 3, 100])
def test_question_context_windows_follow_run_squad(preprocessor, doc_stride):
    context = "one two three four five six seven eight nine ten"
    windows = preprocessor.question_context_windows(
        tf.constant(["what city?", "who"]), tf.constant([context, ""]),
        max_query_length=3, doc_stride=doc_stride)
    num_pieces = len(hf_tokenizer().encode(context, add_special_tokens=False).ids)  # 12: "nine" is 3
    spans = _run_squad_spans(num_pieces, 12 - 3 - 3, doc_stride)
    assert windows["example"].numpy().tolist() == [0] * len(spans) + [1]
    assert windows["window_start"].numpy().tolist() == [s for s, _ in spans] + [0]
    assert windows["window_length"].numpy().tolist() == [n for _, n in spans] + [0]
    token_ids = windows["inputs"]["token_ids"].numpy()
    assert token_ids[1, :5].tolist() == [101, 2054, 2103, 1029, 102]  # [CLS] what city ? [SEP]
    assert token_ids[-1, :4].tolist() == [101, 2040, 102, 102]  # [CLS] who [SEP] [SEP]
