import os

import pytest
import tensorflow as tf

from kbert.data import BertTokenizer
from kbert.data import build_vocab
from kbert.data import read_vocab
from tests.data.conftest import CAESAR_LATIN1
from tests.data.conftest import MOBY_CRLF
from tests.data.conftest import NUM_UNUSED
from tests.data.conftest import PERSUASION
from tests.data.conftest import VOCAB_SIZE


def test_layout_matches_released_vocabularies(vocab_file):
    vocab = read_vocab(vocab_file)
    assert len(vocab) == VOCAB_SIZE
    assert vocab[0] == "[PAD]"
    assert vocab[1 : 1 + NUM_UNUSED] == [f"[unused{i}]" for i in range(NUM_UNUSED)]
    assert vocab[1 + NUM_UNUSED : 5 + NUM_UNUSED] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert any(t.startswith("##") and len(t) > 2 for t in vocab)
    assert len(set(vocab)) == len(vocab)
    assert all(t == t.strip() and t for t in vocab)
    # Uncased: no upper-case letters were learned.
    assert not any(c.isupper() for t in vocab[5 + NUM_UNUSED :] for c in t)


def test_every_character_has_its_continuation_form(vocab_file):
    # As in the released vocabularies: c and ##c for every character, the
    # characters in code-point order right after the reserved tokens.
    vocab = read_vocab(vocab_file)
    characters = [t for t in vocab if len(t) == 1]
    assert vocab[5 + NUM_UNUSED : 5 + NUM_UNUSED + len(characters)] == sorted(characters)
    assert {t[2:] for t in vocab if t.startswith("##") and len(t) == 3} == set(characters)
    assert len(characters) > 40


def test_same_corpus_same_vocabulary(vocab_file, tmp_path):
    # Hugging Face's trainer alone gives a different vocabulary on every run
    # (huggingface/tokenizers#1794); two runs here must agree byte for byte.
    # The session's vocab_file was built with these arguments.
    again = str(tmp_path / "again.txt")
    build_vocab([PERSUASION, CAESAR_LATIN1, MOBY_CRLF], again, vocab_size=VOCAB_SIZE,
                num_unused=NUM_UNUSED, input_encoding="latin-1")
    with open(vocab_file, "rb") as a, open(again, "rb") as b:
        assert a.read() == b.read()


def test_default_unused_gives_bert_base_special_ids(tmp_path):
    out = str(tmp_path / "v.txt")
    build_vocab(PERSUASION, out, vocab_size=600)
    vocab = read_vocab(out)
    assert [vocab.index(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [0, 100, 101, 102, 103]


def test_fast_bert_tokenizer_reads_it(vocab_file):
    tokenizer = BertTokenizer(vocab_file)
    ids = tokenizer.tokenize_to_ids(["Sir Walter Elliot, of Kellynch Hall, in Somersetshire."])[0]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert tokens[0] == "sir" and "," in tokens and tokens[-1] == "."
    assert tokenizer.unk_id not in ids


def test_cased(tmp_path):
    out = str(tmp_path / "v.txt")
    build_vocab(PERSUASION, out, vocab_size=600, do_lower_case=False, num_unused=0)
    assert any(c.isupper() for t in read_vocab(out) for c in t if t[0] != "[")


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="no file matches"):
        build_vocab(str(tmp_path / "missing*.txt"), str(tmp_path / "v.txt"))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    with pytest.raises(ValueError, match="holds no text"):
        build_vocab(str(empty), str(tmp_path / "v.txt"))
    with pytest.raises(ValueError, match="caesar.*:119: not valid utf-8"):
        build_vocab(CAESAR_LATIN1, str(tmp_path / "v.txt"))
    with pytest.raises(ValueError, match="--vocab_size=50"):
        build_vocab(PERSUASION, str(tmp_path / "v.txt"), vocab_size=50)
    with pytest.raises(ValueError, match="--vocab_size=150 is too small.*--limit_alphabet"):
        build_vocab(PERSUASION, str(tmp_path / "v.txt"), vocab_size=150)
    with pytest.raises(ValueError, match="does not exist"):
        build_vocab(PERSUASION, str(tmp_path / "nodir" / "v.txt"))
    (tmp_path / "out").mkdir()
    with pytest.raises(ValueError, match=r"^--output_file='.*/out' is a directory; name a file "
                                         r"in it, such as .*/out/vocab.txt.$"):
        build_vocab(PERSUASION, str(tmp_path / "out"))
    os.rmdir(tmp_path / "out")
    assert not os.path.exists(tmp_path / "v.txt")
    assert tf.io.gfile.listdir(str(tmp_path)) == ["empty.txt"]
