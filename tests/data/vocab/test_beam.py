"""build_vocab --runner: Beam counts the corpus, the vocabulary learned from the counts is the local one."""

import os

import pytest

from kbert.data import build_vocab
from kbert.data.vocab import build_bpe_tokenizer
from kbert.data.vocab import beam as vocab_beam
from tests import forked_python
from tests.conftest import REPO
from tests.data.conftest import CAESAR_LATIN1
from tests.data.conftest import MOBY_CRLF
from tests.data.conftest import NUM_UNUSED
from tests.data.conftest import PERSUASION
from tests.data.conftest import VOCAB_SIZE

CORPUS = [PERSUASION, CAESAR_LATIN1, MOBY_CRLF]


def test_direct_runner_gives_the_local_vocab_txt(vocab_file, tmp_path, monkeypatch):
    # Blocks of 7000 bytes: each file is counted in several pieces, cut inside documents.
    monkeypatch.setattr(vocab_beam, "BLOCK_BYTES", 7000)
    out = str(tmp_path / "vocab.txt")
    result = build_vocab(CORPUS, out, vocab_size=VOCAB_SIZE, num_unused=NUM_UNUSED,
                         input_encoding="latin-1", runner="DirectRunner")
    # The session's vocab_file is the local tool's with these arguments.
    assert open(out, "rb").read() == open(vocab_file, "rb").read()
    assert result["vocab_size"] == VOCAB_SIZE and result["lines"] > 1000
    assert os.listdir(tmp_path) == ["vocab.txt"]  # The counts' work directory is gone.


def test_direct_runner_gives_the_local_bpe_tokenizer_json(bpe_tokenizer_file, tmp_path,
                                                          monkeypatch):
    # The session's BPE is learned locally from these files with these arguments.
    monkeypatch.setattr(vocab_beam, "BLOCK_BYTES", 7000)
    out = str(tmp_path / "tokenizer.json")
    result = build_bpe_tokenizer([PERSUASION, MOBY_CRLF], out, vocab_size=700,
                                 runner="DirectRunner")
    assert open(out, "rb").read() == open(bpe_tokenizer_file, "rb").read()
    assert (result["vocab_size"], result["learned"]) == (704, 699) and result["lines"] > 500
    assert os.listdir(tmp_path) == ["tokenizer.json"]


def test_tool_with_runner_gives_the_local_vocab_txt(tmp_path):
    local, beam = str(tmp_path / "local.txt"), str(tmp_path / "beam.txt")
    build_vocab(PERSUASION, local, vocab_size=600, do_lower_case=False)
    result = forked_python.run(
        [os.path.join(REPO, "tools", "build_vocab.py"), f"--input_file={PERSUASION}",
         f"--output_file={beam}", "--vocab_size=600", "--do_lower_case=false",
         "--runner=DirectRunner", "--direct_num_workers=1"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Wrote 600 tokens" in result.stdout
    assert open(beam, "rb").read() == open(local, "rb").read()
    bad = forked_python.run(
        [os.path.join(REPO, "tools", "build_vocab.py"), f"--input_file={PERSUASION}",
         f"--output_file={beam}", "--direct_num_workers=1"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, timeout=300,
    )
    assert bad.returncode != 0 and "--direct_num_workers=1; Apache Beam options need --runner" in bad.stderr


def test_undecodable_file_fails_naming_file_and_line(tmp_path, monkeypatch):
    monkeypatch.setattr(vocab_beam, "BLOCK_BYTES", 3000)  # Line 119 lies in a later block.
    with pytest.raises(ValueError, match=r"shakespeare-caesar-head.latin1.txt:119: not valid utf-8"):
        build_vocab(CORPUS, str(tmp_path / "v.txt"), vocab_size=VOCAB_SIZE, runner="DirectRunner")
    assert os.listdir(tmp_path) == []
