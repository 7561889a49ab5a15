"""Shared fixtures for the data tests: text slices from tests/testdata and a tiny vocabulary."""

import os

import pytest

TESTDATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "testdata")
PERSUASION = os.path.join(TESTDATA, "austen-persuasion-head.txt")
CAESAR_LATIN1 = os.path.join(TESTDATA, "shakespeare-caesar-head.latin1.txt")
MOBY_CRLF = os.path.join(TESTDATA, "melville-moby_dick-head.crlf.txt")

# Small on purpose: tests stay fast.
VOCAB_SIZE = 1200
NUM_UNUSED = 5


@pytest.fixture(scope="session")
def vocab_file(tmp_path_factory):
    from kbert.data.vocab.builder import build_vocab

    path = str(tmp_path_factory.mktemp("vocab") / "vocab.txt")
    build_vocab(
        [PERSUASION, CAESAR_LATIN1, MOBY_CRLF],
        path,
        vocab_size=VOCAB_SIZE,
        num_unused=NUM_UNUSED,
        input_encoding="latin-1",
    )
    return path


@pytest.fixture(scope="session")
def sentence_corpus(tmp_path_factory):
    """The Austen slice as documents of 30 lines each (one segment per line)."""
    with open(PERSUASION, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    docs = [lines[i : i + 30] for i in range(0, len(lines), 30)]
    path = str(tmp_path_factory.mktemp("corpus") / "sentences.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(doc) for doc in docs) + "\n")
    return path


@pytest.fixture(scope="session")
def bpe_tokenizer_file(tmp_path_factory):
    """A byte-level BPE laid out as ModernBERT's, learned from the Austen and Melville slices."""
    from kbert.data.vocab import build_bpe_tokenizer

    path = str(tmp_path_factory.mktemp("bpe") / "tokenizer.json")
    build_bpe_tokenizer([PERSUASION, MOBY_CRLF], path, vocab_size=700)
    return path
