"""learn_vocab: the vocabulary learned from a corpus' counts is the one learned from its text."""

from kbert.data import build_vocab
from kbert.data.vocab.learning import bert_normalizer
from kbert.data.vocab.learning import count_characters
from kbert.data.vocab.learning import count_words
from kbert.data.vocab.learning import learn_vocab
from tests.data.conftest import NUM_UNUSED
from tests.data.conftest import PERSUASION


def test_learn_vocab_from_counts_equals_build_vocab(tmp_path):
    lines = [line.strip() for line in open(PERSUASION, encoding="utf-8") if line.strip()]
    words = count_words(lines, bert_normalizer(True), lines_per_call=7)
    chars = count_characters(open(PERSUASION, "rb").read())
    out = str(tmp_path / "from_counts.txt")
    assert learn_vocab(sorted(words.items()), chars, out, vocab_size=700, num_unused=NUM_UNUSED) == 700
    build_vocab(PERSUASION, str(tmp_path / "local.txt"), vocab_size=700, num_unused=NUM_UNUSED)
    assert open(out, "rb").read() == open(tmp_path / "local.txt", "rb").read()
    assert count_words(["Hello, wörld.", "HELLO"], bert_normalizer(True)) == {
        "hello": 2, ",": 1, "world": 1, ".": 1}
