"""The tokenizer seam: `load_tokenizer`, the two kinds' facts and files, and a third kind.

`_Characters` is a complete worked example of a third kind of tokenizer: the
contract's attributes and four methods, and `TextPreprocessor` and NER's words
take it with nothing else changed.
"""

import os

import pytest
import tensorflow as tf

from tests.finetune_testing import character_vocabulary
from kbert.data import TextPreprocessor
from kbert.data.tokenizers import ByteLevelBpeTokenizer
from kbert.data.tokenizers import Tokenizer
from kbert.data.tokenizers import WordpieceTokenizer
from kbert.data.tokenizers import load_tokenizer
from kbert.data.tokenizers import tokenizer_class
from kbert.data.words import word_pieces

BPE_JSON = os.path.join(os.path.dirname(__file__), "..", "testdata", "bpe_tokenizer.json")
VOCABULARY = character_vocabulary()


@pytest.fixture(scope="module")
def wordpiece_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("wordpiece")
    (directory / "vocab.txt").write_text("\n".join(VOCABULARY) + "\n")
    (directory / "tokenizer_config.json").write_text('{"do_lower_case": false}\n')
    return str(directory)


def test_a_directory_s_tokenizer_is_its_vocab_txt_with_its_recorded_lower_casing(wordpiece_dir):
    tokenizer = load_tokenizer(wordpiece_dir)
    assert isinstance(tokenizer, WordpieceTokenizer)
    assert tokenizer.file == os.path.join(wordpiece_dir, "vocab.txt")
    assert tokenizer.vocabulary == VOCABULARY and tokenizer.vocabulary_size == len(VOCABULARY)
    assert tokenizer.do_lower_case is False  # recorded
    assert load_tokenizer(wordpiece_dir, do_lower_case=True).do_lower_case is True
    assert load_tokenizer(tokenizer.file).do_lower_case is True  # a file alone: BERT's default
    assert tokenizer.tokenize(tf.constant(["Ab c"])).to_list() == [
        [VOCABULARY.index("A"), VOCABULARY.index("##b"), VOCABULARY.index("c")]]


def test_the_two_kinds_state_their_facts():
    wordpiece = WordpieceTokenizer(VOCABULARY, do_lower_case=True)
    assert (wordpiece.pad_id, wordpiece.unk_id, wordpiece.cls_id, wordpiece.sep_id,
            wordpiece.mask_id) == (0, 1, 2, 3, 4)
    assert wordpiece.templates == (((False, 2, 0), (True, 0, 0), (False, 3, 0)),
                                   ((False, 2, 0), (True, 0, 0), (False, 3, 0), (True, 1, 1),
                                    (False, 3, 1)))
    assert (wordpiece.word_prefix, wordpiece.file, wordpiece.file_name) == ("", None, "vocab.txt")
    bpe = load_tokenizer(BPE_JSON, do_lower_case=True)  # no lower casing: the setting is ignored
    assert isinstance(bpe, ByteLevelBpeTokenizer) and bpe.do_lower_case is False
    assert (bpe.pad_id, bpe.unk_id, bpe.cls_id, bpe.sep_id, bpe.mask_id) == (
        1129, None, 1127, 1128, 1130)
    assert bpe.templates[1] == ((False, 1127, 0), (True, 0, 0), (False, 1128, 0), (True, 1, 1),
                                (False, 1128, 1))
    assert (bpe.word_prefix, bpe.file, bpe.vocabulary_size) == (" ", BPE_JSON, 1135)
    # A file is of the kind its extension says; any other name is a vocab.txt.
    assert [tokenizer_class(name) for name in ("a/tokenizer.json", "vocab.txt", "bert-vocab",
                                               "x.json")] == [
        ByteLevelBpeTokenizer, WordpieceTokenizer, WordpieceTokenizer, ByteLevelBpeTokenizer]


def test_word_starts_come_with_the_offsets():
    wordpiece = WordpieceTokenizer(VOCABULARY)
    ids, starts, ends, starts_word = wordpiece.tokenize_with_offsets(tf.constant(["ab, c"]))
    assert ids.to_list() == [[VOCABULARY.index(t) for t in ("a", "##b", ",", "c")]]
    assert (starts.to_list(), ends.to_list()) == ([[0, 1, 2, 4]], [[1, 2, 3, 5]])
    assert starts_word.to_list() == [[True, False, True, True]]


def test_a_tokenizer_saves_the_files_it_owns(wordpiece_dir, tmp_path):
    for name, tokenizer in (("copied", load_tokenizer(wordpiece_dir)),
                            ("written", WordpieceTokenizer(VOCABULARY, do_lower_case=False))):
        (tmp_path / name).mkdir()
        tokenizer.save(str(tmp_path / name))
        assert sorted(os.listdir(tmp_path / name)) == ["tokenizer_config.json", "vocab.txt"]
        for file in ("vocab.txt", "tokenizer_config.json"):
            assert (tmp_path / name / file).read_bytes() == (
                open(os.path.join(wordpiece_dir, file), "rb").read()), (name, file)
    (tmp_path / "bpe").mkdir()
    load_tokenizer(BPE_JSON).save(str(tmp_path / "bpe"))
    assert os.listdir(tmp_path / "bpe") == ["tokenizer.json"]
    assert (tmp_path / "bpe" / "tokenizer.json").read_bytes() == open(BPE_JSON, "rb").read()
    assert isinstance(load_tokenizer(str(tmp_path / "bpe")), ByteLevelBpeTokenizer)


def test_errors_name_the_directory_and_the_tokens(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"empty has no vocab.txt or tokenizer.json"):
        (tmp_path / "empty").mkdir()
        load_tokenizer(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match=r"lacks \['\[CLS\]', '\[SEP\]'\]; BERT inputs need"):
        WordpieceTokenizer(["[PAD]", "[UNK]", "a"])


class _Characters(Tokenizer):
    """One id per ASCII character (its code + 4), after [PAD], [UNK], [CLS] and [SEP]."""

    file_name = "characters.txt"
    kind = "character"
    noun = "vocabulary"
    lower_casing = False
    allows_spare_rows = False

    def __init__(self):
        super().__init__(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + [chr(c) for c in range(128)],
                         name="characters")
        self.file, self.do_lower_case, self.word_prefix = None, False, ""
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = 0, 1, 2, 3, None
        self.templates = (((False, 2, 0), (True, 0, 0), (False, 3, 0)),
                          ((False, 2, 0), (True, 0, 0), (False, 3, 0), (True, 1, 1),
                           (False, 3, 1)))

    @classmethod
    def from_file(cls, path, do_lower_case=None):
        return cls()

    @classmethod
    def read_vocabulary(cls, path):
        return cls().vocabulary

    def tokenize(self, texts):
        codes = tf.strings.unicode_decode(texts, "UTF-8")
        return codes.with_flat_values(tf.where(codes.flat_values < 128, codes.flat_values + 4, 1))

    def tokenize_with_offsets(self, texts):
        codes, starts = tf.strings.unicode_decode_with_offsets(texts, "UTF-8")
        ids = self.tokenize(texts)
        ends = starts + tf.ones_like(starts)
        return ids, starts, ends, tf.ones_like(ids, tf.bool)


def test_a_third_kind_packs_and_finds_words_with_nothing_else_changed():
    preprocessor = TextPreprocessor(_Characters(), max_seq_length=6)
    inputs = preprocessor(tf.constant(["ab", ""]), tf.constant(["cde", "f"]))
    a, b, c, f = (ord(x) + 4 for x in "abcf")
    # The longer segment loses tokens first (google-research/bert's truncation).
    assert inputs["token_ids"].numpy().tolist() == [[2, a, b, 3, c, 3], [2, 3, f, 3, 0, 0]]
    assert inputs["segment_ids"].numpy().tolist() == [[0, 0, 0, 0, 1, 1], [0, 0, 1, 1, 0, 0]]
    pieces, first, word = word_pieces(preprocessor, tf.ragged.constant([["ab", "c"]]))
    assert (pieces.to_list(), first.to_list(), word.to_list()) == (
        [[a, b, c]], [[True, False, True]], [[0, 0, 1]])
