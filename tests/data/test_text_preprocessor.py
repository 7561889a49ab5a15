"""The one tokenizer and packer: Hugging Face parity, google-research/bert truncation, errors."""

import numpy as np
import pytest
import tensorflow as tf

from tests.finetune_testing import character_vocabulary
from kbert.data import TextPreprocessor

VOCABULARY = character_vocabulary()


def ids(text):
    """Character-vocabulary ids of one word: first char, then ## continuations."""
    return [VOCABULARY.index(text[0])] + [VOCABULARY.index("##" + c) for c in text[1:]]


def preprocessor(max_seq_length):
    return TextPreprocessor.from_vocabulary(VOCABULARY, True, max_seq_length)


def _truncate_seq_pair(a, b, max_length):
    # run_classifier.py's reference: drop a token from the longer segment.
    a, b = list(a), list(b)
    while len(a) + len(b) > max_length:
        (a if len(a) > len(b) else b).pop()
    return a, b


@pytest.mark.parametrize("length_a,length_b", [(10, 3), (3, 10), (9, 9), (8, 7), (2, 2)])
def test_pair_packing_matches_run_classifier(length_a, length_b):
    text_a, text_b = "a" * length_a, "b" * length_b
    packer = preprocessor(12)
    token_ids, segment_ids = packer.pack_ragged(
        [packer.tokenize([text_a]), packer.tokenize([text_b])])
    a, b = _truncate_seq_pair(ids(text_a), ids(text_b), 12 - 3)
    cls, sep = VOCABULARY.index("[CLS]"), VOCABULARY.index("[SEP]")
    assert token_ids.to_list()[0] == [cls] + a + [sep] + b + [sep]
    assert segment_ids.to_list()[0] == [0] * (len(a) + 2) + [1] * (len(b) + 1)


@pytest.mark.parametrize("length_a,length_b", [(10, 3), (3, 10), (9, 9), (8, 7), (2, 2), (0, 12)])
def test_pair_truncation_equals_tensorflow_text_round_robin_trimmer(length_a, length_b):
    import tensorflow_text as tft

    packer = preprocessor(12)
    segments = [packer.tokenize(["a" * length_a]), packer.tokenize(["b" * length_b])]
    token_ids, _ = packer.pack_ragged(segments)
    trimmed = tft.RoundRobinTrimmer(12 - 3).trim(segments)
    expected, _ = tft.combine_segments(trimmed, packer.cls_id, packer.sep_id)
    assert token_ids.to_list() == expected.to_list()


def test_pair_packing_is_a_small_graph_that_keeps_ragged_rows_apart():
    """Truncation and the special-token columns are built from row splits, not by
    broadcasting ragged against dense shapes: every tf.data iterator and SavedModel
    instantiates this graph again (it had 1,536 nodes, now 446; an evaluation's iterator
    took 0.6 s to start). Rows of every length, an empty one included, keep their own pieces."""
    packer = preprocessor(8)
    spec = tf.RaggedTensorSpec([None, None], tf.int32, row_splits_dtype=tf.int64)
    pack = tf.function(lambda a, b: packer.pack_ragged([a, b]))
    assert len(pack.get_concrete_function(spec, spec).graph.as_graph_def().node) < 600
    texts_a, texts_b = ["aaaaaaa", "", "ab", "abcd"], ["b", "bbbbbbb", "", "bcdefg"]
    token_ids, segment_ids = pack(packer.tokenize(texts_a), packer.tokenize(texts_b))
    cls, sep = VOCABULARY.index("[CLS]"), VOCABULARY.index("[SEP]")
    for row, (text_a, text_b) in enumerate(zip(texts_a, texts_b)):
        a, b = _truncate_seq_pair(ids(text_a) if text_a else [], ids(text_b) if text_b else [],
                                  8 - 3)
        assert token_ids[row].numpy().tolist() == [cls] + a + [sep] + b + [sep], row
        assert segment_ids[row].numpy().tolist() == [0] * (len(a) + 2) + [1] * (len(b) + 1)


def test_vocabulary_and_length_errors(tmp_path):
    from kbert.data import INPUT_TOKENS, check_max_seq_length, read_vocab

    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\nhello\n")
    with pytest.raises(ValueError, match=r"vocab.txt' lacks \[CLS\], \[SEP\]"):
        read_vocab(str(path), INPUT_TOKENS)
    with pytest.raises(FileNotFoundError, match="missing.txt' does not exist"):
        read_vocab(str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError, match=r"max_seq_length=600 is larger than the encoder's 512"):
        check_max_seq_length(600, 512)


from tests.serving_testlib import PAIRS  # noqa: E402
from tests.serving_testlib import TEXTS  # noqa: E402
from tests.serving_testlib import VOCAB  # noqa: E402
from tests.serving_testlib import hf_tokenizer  # noqa: E402
from tests.serving_testlib import reference_inputs  # noqa: E402


@pytest.fixture(scope="module")
def bert_preprocessor():
    return TextPreprocessor.from_vocab_file(VOCAB, True, 12)


def test_tokenize_matches_hugging_face(bert_preprocessor):
    tokenizer = hf_tokenizer()
    pieces = bert_preprocessor.tokenize(tf.constant(TEXTS + [""]))
    for i, text in enumerate(TEXTS + [""]):
        assert pieces[i].numpy().tolist() == tokenizer.encode(text, add_special_tokens=False).ids


def test_invalid_utf8_is_dropped_not_an_error(bert_preprocessor):
    raw = b"bad \xff\xfe by\xc3tes"
    pieces = bert_preprocessor.tokenize(tf.constant([raw]))
    expected = hf_tokenizer().encode(raw.decode("utf-8", "ignore"), add_special_tokens=False).ids
    assert pieces[0].numpy().tolist() == expected == [2919, 2011, 2618, 2015]


@pytest.mark.parametrize("pairs", [None, PAIRS])
def test_pack_truncates_like_google_bert(bert_preprocessor, pairs):
    tokenize = bert_preprocessor.tokenize
    segments = [tokenize(tf.constant(TEXTS))] + ([tokenize(tf.constant(pairs))] if pairs else [])
    packed = {key: value.numpy() for key, value in bert_preprocessor.pack(segments).items()}
    expected = reference_inputs(TEXTS, pairs, 12)
    for key in expected:
        np.testing.assert_array_equal(packed[key], expected[key], err_msg=key)
    assert packed["token_ids"].shape[1] == 12  # the longest row is truncated to max_seq_length
