"""No train/serve skew: fine-tuning, pre-training and an exported SavedModel give the same ids.

All three build `kbert.data.BertWordpieceTokenizer`; this checks the ids they
produce end to end (fine-tuning's tf.data featurization, pre-training's
`BertTokenizer`, the serving preprocessing after a SavedModel round trip)
on strings that tell tokenizers apart, against google-research/bert's rules.
"""

import numpy as np
import pytest
import tensorflow as tf

from kbert.data import BertTokenizer
from kbert.data import TextPreprocessor
from kbert.data import classification_dataset
from kbert.data import read_vocab
from tests.data.test_tokenization import TRICKY
from tests.data.test_tokenization import _reference_basic_tokenize
from tests.data.test_tokenization import _reference_wordpiece
from tests.serving_testlib import TEXTS
from tests.serving_testlib import VOCAB

MAX_SEQ_LENGTH = 64
# Where tensorflow-text's own normalization (NFKC case folding, control
# characters as spaces) would differ from the original BERT tokenizer.
SKEW_PRONE = [
    "Straße … naïve ＦＵＬＬ ﬁne ΟΔΟΣ",
    "a\x00b co\u00adoperate zero\u200bwidth\ttab",
    "東京は日本の首都です。",
]
STRINGS = SKEW_PRONE + TRICKY + TEXTS


def _fine_tuning_ids(texts):
    preprocessor = TextPreprocessor.from_vocab_file(VOCAB, True, MAX_SEQ_LENGTH)
    rows = {}
    for batch in classification_dataset(preprocessor, texts, None, None, batch_size=4,
                                        is_training=False):
        lengths = batch["padding_mask"].numpy().sum(axis=1)
        for row, index in enumerate(batch["example_index"].numpy()):
            rows[int(index)] = batch["token_ids"].numpy()[row, :lengths[row]].tolist()
    return [rows[i] for i in range(len(texts))]


def _served_ids(texts, export_dir):
    module = tf.Module()
    module.preprocessor = TextPreprocessor.from_vocab_file(VOCAB, True, MAX_SEQ_LENGTH)
    module.serve = tf.function(
        lambda text: module.preprocessor.pack([module.preprocessor.tokenize(text)]),
        input_signature=[tf.TensorSpec([None], tf.string)])
    tf.saved_model.save(module, export_dir)
    del module
    inputs = tf.saved_model.load(export_dir).serve(tf.constant(texts))
    lengths = inputs["padding_mask"].numpy().sum(axis=1)
    return [inputs["token_ids"].numpy()[row, :lengths[row]].tolist() for row in range(len(texts))]


@pytest.fixture(scope="module")
def vocab():
    return read_vocab(VOCAB)


def test_fine_tuning_and_exported_serving_give_identical_ids(tmp_path, vocab):
    fine_tuning = _fine_tuning_ids(STRINGS)
    served = _served_ids(STRINGS, str(tmp_path / "saved_model"))
    assert served == fine_tuning
    # Pre-training tokenized the same way, and all of it is the original BERT's.
    pre_training = BertTokenizer(VOCAB, do_lower_case=True).tokenize_to_ids(STRINGS)
    cls, sep = vocab.index("[CLS]"), vocab.index("[SEP]")
    words = set(vocab)
    for text, ids, pre in zip(STRINGS, fine_tuning, pre_training):
        expected = _reference_wordpiece(_reference_basic_tokenize(text, True), words)
        expected = [cls] + [vocab.index(t) for t in expected][:MAX_SEQ_LENGTH - 2] + [sep]
        assert ids == expected == [cls] + pre[:MAX_SEQ_LENGTH - 2] + [sep], repr(text)
    tokens = [vocab[i] for i in fine_tuning[0]]
    # Not "...", "full", "fi" as NFKC case folding would give ("Straße" is
    # [UNK] here, not "strasse"; the small vocabulary has no Greek).
    assert tokens == ["[CLS]", "[UNK]", "…", "n", "##a", "##i", "##v", "##e", "[UNK]",
                      "ﬁ", "##ne", "[UNK]", "[SEP]"], tokens
    # U+0000 and the soft hyphen vanish instead of splitting words.
    assert [vocab[i] for i in fine_tuning[1]][:4] == ["[CLS]", "a", "##b", "co"]
    assert [vocab[i] for i in fine_tuning[1]][4] == "##o"


def test_offsets_point_into_the_original_text():
    preprocessor = TextPreprocessor.from_vocab_file(VOCAB, True, MAX_SEQ_LENGTH)
    text = "Straße … Naïve ＦＵＬＬ co\u00adoperate Zürich"
    ids, starts, ends, _ = preprocessor.tokenize_with_offsets(tf.constant([text]))
    assert ids.to_list() == preprocessor.tokenize(tf.constant([text])).to_list()
    raw = text.encode("utf-8")
    spans = [raw[s:e].decode("utf-8") for s, e in zip(starts[0].numpy(), ends[0].numpy())]
    vocab = read_vocab(VOCAB)
    pieces = [vocab[i] for i in ids[0].numpy()]
    # Pieces cover whole source characters: "ï" is 2 bytes, dropped U+00AD none.
    assert list(zip(pieces, spans)) == [
        ("[UNK]", "Straße"), ("…", "…"), ("n", "N"), ("##a", "a"), ("##i", "ï"), ("##v", "v"),
        ("##e", "e"), ("[UNK]", "ＦＵＬＬ"), ("co", "co"), ("##o", "o"), ("##p", "p"),
        ("##er", "er"), ("##a", "a"), ("##te", "te"), ("z", "Z"), ("##u", "ü"), ("##r", "r"),
        ("##ic", "ic"), ("##h", "h")]
    np.testing.assert_array_equal(starts.row_lengths(), ids.row_lengths())
