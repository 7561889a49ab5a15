"""CoNLL-2003 reader on real lines (tests/testdata/finetune/conll2003) and bad input."""

import os

import pytest

from tests.finetune_testing import TESTDATA
from kbert.tasks.token_classification.conll import conll_split_file
from kbert.tasks.token_classification.conll import read_conll

CONLL = os.path.join(TESTDATA, "conll2003")


def test_reads_sentences_and_drops_docstart():
    sentences = read_conll(conll_split_file(CONLL, "dev"))  # valid.txt
    assert len(sentences) == 4
    first = sentences[0]
    assert first.words[:4] == ["CRICKET", "-", "LEICESTERSHIRE", "TAKE"]
    assert first.tags[:4] == ["O", "O", "B-ORG", "O"]
    assert sentences[1].words == ["LONDON", "1996-08-30"]
    assert sentences[1].tags == ["B-LOC", "O"]
    assert all(len(s.words) == len(s.tags) for s in sentences)


def test_split_file_names():
    assert conll_split_file(CONLL, "train").endswith("train.txt")
    assert conll_split_file(CONLL, "dev").endswith("valid.txt")
    with pytest.raises(FileNotFoundError, match=r"no dev data in --data_dir=.*\['dev.txt', "
                                                 r"'valid.txt', 'eng.testa'\]"):
        conll_split_file(os.path.dirname(CONLL), "dev")


def test_unknown_tag_names_file_and_line(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP B-ACTION\n")
    with pytest.raises(ValueError, match=r"train.txt:4: unknown tag 'B-ACTION'"):
        read_conll(str(path))


def test_line_with_one_column(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("EU NNP B-NP B-ORG\nrejects\n")
    with pytest.raises(ValueError, match=r"train.txt:2: 'rejects' has 1 column"):
        read_conll(str(path))


def test_a_byte_that_is_not_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "train.txt"
    path.write_bytes(b"EU NNP B-NP B-ORG\n\xff NN I-NP O\n")
    with pytest.raises(ValueError, match=r"train.txt:2: not UTF-8 text \(invalid start byte 0xff "
                                         r"at column 1\)"):
        read_conll(str(path))


def test_file_without_sentences(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("-DOCSTART- -X- -X- O\n\n")
    with pytest.raises(ValueError, match="has no sentences"):
        read_conll(str(path))
