"""`build_bpe_tokenizer`: a byte-level BPE laid out as ModernBERT's, the same file every time.

The layout is compared with `tests/testdata/bpe_tokenizer.json`, which has the
structure of ModernBERT's own `tokenizer.json` (that file cannot be downloaded
here; see tests/testdata/README.md), and the learned file's ids with Hugging
Face `tokenizers`' on text it was not learned from.
"""

import json
import os

import pytest
import tensorflow as tf
import tokenizers

from kbert.data import TextPreprocessor
from kbert.data import load_tokenizer
from kbert.data.vocab import build_bpe_tokenizer
from kbert.data.vocab import bpe_learning
from tests.data.conftest import MOBY_CRLF
from tests.data.conftest import PERSUASION
from tests.data.conftest import TESTDATA

CORPUS = [PERSUASION, MOBY_CRLF]
MODERNBERT_SHAPED = os.path.join(TESTDATA, "bpe_tokenizer.json")
# Text the tokenizer was not learned from: accents, CJK, emoji, digits, runs and
# kinds of whitespace, the special tokens in running text.
HELD_OUT = [
    "Friends, Romans, countrymen, lend me your ears; I come to bury Caesar, not to praise him.",
    "Café naïve façade résumé Zürich Ærø Ångström — “quoted” ‘text’… ½ ≤ ∞",
    "東京は日本の首都です。서울은 한국의 수도입니다。 😀 👍🏽 🇫🇷",
    "Numbers 1234567890, 3.14159, 2,718, 1e-10, 100% and 2024-12-19.",
    "  two  spaces,   three,\ttab,\u00a0nbsp and trailing   ",
    "a [MASK] b[MASK]c [CLS] [SEP] [PAD] [UNK] [unused3]",
    "",
    "don't we'll they've I'M",
]


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("bpe") / "tokenizer.json")
    result = build_bpe_tokenizer(CORPUS, path, vocab_size=700)
    return path, result


def test_same_corpus_same_file_whatever_the_threads(learned, tmp_path, monkeypatch):
    path, _ = learned
    # `tokenizers` reads TOKENIZERS_PARALLELISM at each call: "false" runs its
    # trainer on one thread, where the fixture's run used all of them.
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    again = str(tmp_path / "tokenizer.json")
    build_bpe_tokenizer(CORPUS, again, vocab_size=700)
    assert open(again, "rb").read() == open(path, "rb").read()


def test_counted_words_give_the_same_file(learned, tmp_path):
    # What a Beam pipeline does (kbert.data.vocab.beam): count each block's words,
    # sum, learn from the counts. Blocks of 100 lines here, cut inside paragraphs.
    path, result = learned
    lines = [line.strip() for name in CORPUS
             for line in open(name, encoding="utf-8").read().split("\n") if line.strip()]
    counts = sum((bpe_learning.count_words(lines[i:i + 100]) for i in range(0, len(lines), 100)),
                 start=bpe_learning.count_words([]))
    again = str(tmp_path / "tokenizer.json")
    bpe_learning.learn_bpe(sorted(counts.items()), again, vocab_size=700, lines=len(lines))
    assert open(again, "rb").read() == open(path, "rb").read()
    assert result["lines"] == len(lines)


def test_laid_out_as_modernbert_s(learned):
    path, result = learned
    config = json.load(open(path, encoding="utf-8"))
    reference = json.load(open(MODERNBERT_SHAPED, encoding="utf-8"))
    # 700 rounded up to a multiple of 64: 704 ids, all but 5 special tokens learned.
    assert (result["vocab_size"], result["learned"], result["special"], result["unused"]) == (
        704, 699, 5, 0)
    model = config["model"]
    assert len(model["vocab"]) == 699 and len(model["merges"]) == 699 - 256
    for key in ("normalizer", "pre_tokenizer", "decoder"):
        assert config[key] == reference[key], key
    assert {k: v for k, v in model.items() if k not in ("vocab", "merges")} == {
        k: v for k, v in reference["model"].items() if k not in ("vocab", "merges")}
    # The byte symbols first, in code-point order ("!" .. "Ń"), then the merges' tokens.
    by_id = sorted(model["vocab"], key=model["vocab"].get)
    assert by_id[:256] == sorted(by_id[:256]) and by_id[0] == "!"
    assert by_id[256:] == ["".join(merge) for merge in model["merges"]]
    # ModernBERT's special tokens in its order after the learned ones, with its flags.
    added = [(t["id"], t["content"]) for t in config["added_tokens"]]
    assert added == list(enumerate(["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"], start=699))
    flags = ("single_word", "lstrip", "rstrip", "normalized", "special")
    theirs = {t["content"]: {f: t[f] for f in flags} for t in reference["added_tokens"]}
    for token in config["added_tokens"]:
        assert {f: token[f] for f in flags} == theirs[token["content"]], token["content"]

    def template(processor):  # The post-processor with its special tokens' ids left out.
        return {k: v for k, v in processor.items() if k != "special_tokens"}

    assert template(config["post_processor"]) == template(reference["post_processor"])
    assert {k: v["ids"] for k, v in config["post_processor"]["special_tokens"].items()} == {
        "[CLS]": [700], "[SEP]": [701]}


def test_a_small_corpus_pads_with_unused_tokens_to_a_multiple_of_64(tmp_path):
    path = str(tmp_path / "tokenizer.json")
    small = tmp_path / "small.txt"
    small.write_text("the cat sat on the mat\nthe cat ate the rat\n")
    result = build_bpe_tokenizer(str(small), path, vocab_size=1000)
    # Pairs seen at least twice, most frequent first: "at" (cat x2, sat, mat, ate, rat), then
    # "he" and "t"+"he" (4 each: the x2, Ġthe x2), then 2 each; no other pair is left twice.
    merges = json.load(open(path, encoding="utf-8"))["model"]["merges"]
    assert merges == [["a", "t"], ["h", "e"], ["t", "he"], ["c", "at"], ["Ġ", "the"],
                      ["Ġ", "cat"]]
    # 256 bytes + 6 merges + 5 special tokens = 267, padded to 320 with 53 [unusedN]
    # (not to the 1024 asked for: rows nothing could fill).
    assert (result["vocab_size"], result["learned"], result["unused"]) == (320, 262, 53)
    vocabulary = load_tokenizer(path).vocabulary
    assert vocabulary[262:267] == ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    assert vocabulary[267:] == [f"[unused{i}]" for i in range(53)]


def test_kbert_s_ids_equal_tokenizers_on_text_it_was_not_learned_from(learned):
    path, _ = learned
    reference = tokenizers.Tokenizer.from_file(path)
    tokenizer = load_tokenizer(path)
    ids = tokenizer.tokenize(tf.constant(HELD_OUT)).to_list()
    assert ids == [reference.encode(text, add_special_tokens=False).ids for text in HELD_OUT]
    assert len(set(ids[2])) > 10  # CJK and emoji are bytes, never unknown.
    # Packed with its post-processor's template, pairs included.
    preprocessor = TextPreprocessor(tokenizer, max_seq_length=256)  # Nothing cut.
    packed = preprocessor(tf.constant(HELD_OUT[:2]), tf.constant(HELD_OUT[3:5]))
    for row, (a, b) in enumerate(zip(HELD_OUT[:2], HELD_OUT[3:5])):
        encoding = reference.encode(a, b)
        length = len(encoding.ids)
        assert packed["token_ids"][row, :length].numpy().tolist() == encoding.ids
        assert packed["segment_ids"][row, :length].numpy().tolist() == encoding.type_ids


def test_bad_arguments_are_refused_and_nothing_is_written(tmp_path):
    out = str(tmp_path / "tokenizer.json")
    with pytest.raises(ValueError, match=r"--vocab_size=261 is too small for a byte-level BPE: "
                                         r"its 256 byte symbols and 5 special tokens"):
        build_bpe_tokenizer(PERSUASION, out, vocab_size=261)
    with pytest.raises(ValueError, match=r"vocab\.txt'?: a byte-level BPE tokenizer is a \.json "
                                         r"file"):
        build_bpe_tokenizer(PERSUASION, str(tmp_path / "vocab.txt"), vocab_size=400)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n")
    with pytest.raises(ValueError, match=r"empty.txt'? holds no text: nothing to learn"):
        build_bpe_tokenizer(str(empty), out, vocab_size=400)
    assert sorted(os.listdir(tmp_path)) == ["empty.txt"]
