"""Byte-level BPE `tokenizer.json` in the graph: the Hugging Face `tokenizers` ids, packing, errors.

The reference is the `tokenizers` library itself on tests/testdata/bpe_tokenizer.json,
a small tokenizer laid out like ModernBERT's (tests/testdata/make_bpe_tokenizer.py).
"""

import json
import os
import random

import pytest
import tensorflow as tf
from tokenizers import Tokenizer

from kbert.data import ByteLevelBpeTokenizer
from kbert.data import TextPreprocessor
from kbert.data import read_tokenizer_json

TOKENIZER_JSON = os.path.join(os.path.dirname(__file__), "..", "testdata", "bpe_tokenizer.json")

TRICKY = [
    "", " ", "Hello world", "  leading spaces", "trailing   ", "a  b", "a\n\nb", "a \n b\n",
    "It's John's; they'll 've  'sx 'S", "[CLS] special tokens in text [SEP] [PAD]", "a [MASK] b",
    "a   [MASK]b", "[MASK]", "x[MASK]", "[unused0][UNK]<|endoftext|><|padding|>",
    "Café naïve Zürich", "Cafe\u0301 written with a combining accent", "東京は日本の首都です。",
    "Emoji 😀👍🏽 🇫🇷 ❤️", "1234567890 3.14159 100% 2024-12-19", "!!!???... ---", "a" + " " * 30 + "b",
    "|||IP_ADDRESS||| and |||EMAIL_ADDRESS|||", "tab\tand\u00a0nbsp\u3000ideographic\u2009thin",
    "\u0966 Devanagari digit six \u0966", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "\u2028line separator\u0085next line", "a\u200bb zero width", "ﬁne ½ Ⅻ ² full-width ＡＢＣ",
]


@pytest.fixture(scope="module")
def hf():
    return Tokenizer.from_file(TOKENIZER_JSON)


@pytest.fixture(scope="module")
def spec():
    return read_tokenizer_json(TOKENIZER_JSON)


@pytest.fixture(scope="module")
def tokenizer(spec):
    return ByteLevelBpeTokenizer(spec)


def _hf_ids(hf, texts):
    return [encoding.ids for encoding in hf.encode_batch(texts, add_special_tokens=False)]


def test_the_test_tokenizer_is_shaped_like_modernbert_s(spec, hf):
    assert spec.normalization == "NFC" and not spec.add_prefix_space
    assert len(spec.vocabulary) == hf.get_vocab_size(with_added_tokens=True) == 1135
    assert [spec.token_id(t) for t in ("|||IP_ADDRESS|||", "<|padding|>", "[CLS]", "[MASK]")] == [
        0, 1, 1127, 1130]
    mask = [token for token in spec.added_tokens if token.content == "[MASK]"][0]
    assert mask.lstrip and mask.special and not mask.normalized
    assert spec.single == ((1127, 0), ("A", 0), (1128, 0))
    assert spec.pair == ((1127, 0), ("A", 0), (1128, 0), ("B", 1), (1128, 1))


def test_ids_equal_tokenizers_on_tricky_strings(tokenizer, hf):
    ids = tokenizer.tokenize(tf.constant(TRICKY)).to_list()
    for text, got, want in zip(TRICKY, ids, _hf_ids(hf, TRICKY)):
        assert got == want, text
    # The cases that matter are really there: spaces merge, special tokens
    # are one id, [MASK] takes the spaces before it.
    mask_line = ids[TRICKY.index("a   [MASK]b")]
    assert mask_line == [hf.token_to_id("a"), 1130, hf.token_to_id("b")]
    assert ids[TRICKY.index("")] == []


def test_ids_equal_tokenizers_on_random_strings(tokenizer, hf):
    # Every rule meets every other: whitespace kinds before words and at the
    # end, contractions after spaces, special tokens next to text, NFC.
    rng = random.Random(0)
    alphabet = list("  \n\t\r\u00a0\u3000'sdtmlrevaAbc09.,!-") + [
        "'s", "'ll", "[MASK]", "[CLS]", "|||IP_ADDRESS|||", "é", "e\u0301", "東", "😀", "६",
        "\u200b", "\x1c", "\x85", "     ", "ﬁ", "²"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20))) for _ in range(400)]
    ids = tokenizer.tokenize(tf.constant(texts)).to_list()
    for text, got, want in zip(texts, ids, _hf_ids(hf, texts)):
        assert got == want, text


def test_every_character_class_splits_as_tokenizers(tokenizer, hf):
    # One character of each kind in the first 0x3100 code points (letters,
    # marks, digits, punctuation, whitespace, controls) between words.
    texts = [f"a{chr(c)} b{chr(c)}{chr(c)} {chr(c)}" for c in range(1, 0x3100)
             if not 0xD800 <= c < 0xE000]
    ids = tokenizer.tokenize(tf.constant(texts)).to_list()
    wrong = [text for text, got, want in zip(texts, ids, _hf_ids(hf, texts)) if got != want]
    assert wrong == []


def test_a_long_text_is_tokenized_whole_and_the_same_in_a_graph(tokenizer, hf):
    with open(os.path.join(os.path.dirname(TOKENIZER_JSON), "emma_chapter1.txt"),
              encoding="utf-8") as f:
        text = f.read()
    graph = tf.function(tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    got = graph(tf.constant([text, "a  b"])).to_list()
    assert got == _hf_ids(hf, [text, "a  b"])
    assert len(got[0]) > 1500


def test_the_preprocessor_packs_single_texts_and_pairs_as_tokenizers(hf):
    preprocessor = TextPreprocessor.from_tokenizer_json(TOKENIZER_JSON, max_seq_length=64)
    texts, pairs = ["Hello world", "[MASK] is here", ""], ["It's  fine", "x", "東京"]
    for inputs, encodings in ((preprocessor(tf.constant(texts)), hf.encode_batch(texts)),
                              (preprocessor(tf.constant(texts), tf.constant(pairs)),
                               hf.encode_batch(list(zip(texts, pairs))))):
        length = max(len(e.ids) for e in encodings)
        assert inputs["token_ids"].shape == (3, length)
        for row, encoding in enumerate(encodings):
            n = len(encoding.ids)
            assert inputs["token_ids"][row].numpy().tolist() == encoding.ids + [1129] * (length - n)
            assert inputs["segment_ids"][row, :n].numpy().tolist() == encoding.type_ids
            assert inputs["padding_mask"][row].numpy().tolist() == [1] * n + [0] * (length - n)
    assert (preprocessor.cls_id, preprocessor.sep_id, preprocessor.pad_id) == (1127, 1128, 1129)
    assert not preprocessor.do_lower_case and preprocessor.vocabulary_size == 1135


def test_a_batch_of_only_empty_texts_is_cls_sep_as_tokenizers(tokenizer, hf):
    # With no byte to merge, the BPE merge loop used to pair a byte with a
    # padding element (UnsortedSegmentSum: data.shape = [1] ... segment_ids.shape = [0]).
    # (tests/export/test_byte_level_bpe_export.py asks an exported model too.)
    preprocessor = TextPreprocessor(tokenizer, max_seq_length=16)
    for texts in ([""], ["", ""]):
        want = [encoding.ids for encoding in hf.encode_batch(texts)]
        assert want == [[1127, 1128]] * len(texts)
        assert preprocessor(tf.constant(texts))["token_ids"].numpy().tolist() == want
    pair = preprocessor(tf.constant([""]), tf.constant([""]))
    assert pair["token_ids"].numpy().tolist() == [hf.encode("", "").ids] == [[1127, 1128, 1128]]
    assert pair["segment_ids"].numpy().tolist() == [hf.encode("", "").type_ids] == [[0, 0, 1]]
    assert preprocessor(tf.constant([], tf.string))["token_ids"].shape == (0, 0)
    pieces, starts, ends, starts_word = tokenizer.tokenize_with_offsets(tf.constant(["", ""]))
    assert [x.to_list() for x in (pieces, starts, ends, starts_word)] == [[[], []]] * 4


def test_long_texts_are_truncated_as_tokenizers_and_pairs_as_run_classifier(hf):
    preprocessor = TextPreprocessor.from_tokenizer_json(TOKENIZER_JSON, max_seq_length=12)
    long_text = "Persuasion, by Jane Austen: Sir Walter Elliot, of Kellynch Hall."
    inputs = preprocessor(tf.constant([long_text]))
    truncating = Tokenizer.from_file(TOKENIZER_JSON)
    truncating.enable_truncation(max_length=12)
    assert inputs["token_ids"].numpy().tolist() == [truncating.encode(long_text).ids]
    # Pairs lose tokens from the longer segment first (google-research/bert).
    a, b = _hf_ids(hf, [long_text, "a short one"])
    token_ids = preprocessor(tf.constant([long_text]), tf.constant(["a short one"]))["token_ids"]
    kept_b = min(len(b), max(9 - len(a), 9 // 2))
    assert token_ids.numpy().tolist() == [[1127] + a[:9 - kept_b] + [1128] + b[:kept_b] + [1128]]


def _hf_trimmed_byte_offsets(texts):
    """`tokenizers`' offsets with a ByteLevel post-processor's `trim_offsets`, as UTF-8 bytes."""
    from tokenizers import processors

    trimming = Tokenizer.from_file(TOKENIZER_JSON)
    trimming.post_processor = processors.ByteLevel(trim_offsets=True, add_prefix_space=False)
    found = []
    for text, encoding in zip(texts, trimming.encode_batch(texts, add_special_tokens=False)):
        byte_of = [len(text[:i].encode("utf-8")) for i in range(len(text) + 1)]
        found.append((encoding.ids, [(byte_of[a], byte_of[b]) for a, b in encoding.offsets]))
    return found


def _offsets(tokenizer, texts):
    ids, starts, ends, first = tokenizer.tokenize_with_offsets(tf.constant(texts))
    return [(i, list(zip(s, e)), f) for i, s, e, f in
            zip(ids.to_list(), starts.to_list(), ends.to_list(), first.to_list())]


def test_offsets_equal_tokenizers_trimmed_offsets(tokenizer):
    # Normalization that changes a word's length (a combining accent under
    # NFC) is aligned character by character by `tokenizers` only (below).
    rng = random.Random(1)
    alphabet = list("  \n\t\u00a0\u3000'sdtmlreAbc09.,!-") + [
        "'s", "[MASK]", "[CLS]", "|||IP_ADDRESS|||", "é", "東", "😀", "\u200b", "     ", "ﬁ"]
    texts = [text for text in TRICKY if "\u0301" not in text] + [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20))) for _ in range(300)]
    got = _offsets(tokenizer, texts)
    for text, (ids, offsets, _), want in zip(texts, got, _hf_trimmed_byte_offsets(texts)):
        assert (ids, offsets) == want, text
    # By hand: " world" covers "world", a run of spaces ("  ", an added token)
    # nothing, the emoji's three byte tokens the whole emoji, " [MASK]" (taking
    # the space before it) "[MASK]".
    text = "Hello world!  😀 a [MASK]"
    (ids, offsets, first), = _offsets(tokenizer, [text])
    pieces = [text.encode("utf-8")[a:b].decode("utf-8") for a, b in offsets]
    assert "world" in "".join(pieces) and not any(p.startswith(" ") for p in pieces)
    assert pieces[ids.index(1130)] == "[MASK]" and pieces.count("😀") == 3
    # A word is one piece of GPT-2's pre-tokenization or an added token ("  " here).
    bounds = [i for i, starts_word in enumerate(first) if starts_word] + [len(first)]
    words = [text.encode("utf-8")[offsets[a][0]:offsets[b - 1][1]].decode("utf-8")
             for a, b in zip(bounds, bounds[1:])]
    assert words == ["Hello", "world", "!", "", "😀", "a", "[MASK]"]


def test_offsets_around_a_word_normalization_changes(tokenizer):
    # "e" + combining acute is one NFC character: the tokens of "Cafe\u0301" stay
    # inside it, and every later word's are where `tokenizers` puts them.
    text = "Cafe\u0301 au lait"
    (ids, offsets, _), = _offsets(tokenizer, [text])
    want_ids, want = _hf_trimmed_byte_offsets([text])[0]
    assert ids == want_ids
    assert all(0 <= a <= b <= len(text.encode("utf-8")) for a, b in offsets)
    later = [i for i, (a, _) in enumerate(want) if a >= len("Cafe\u0301".encode("utf-8"))]
    assert len(later) >= 2 and [offsets[i] for i in later] == [want[i] for i in later]


def test_the_preprocessor_s_offsets_and_words_of_a_bpe_model():
    preprocessor = TextPreprocessor.from_tokenizer_json(TOKENIZER_JSON, max_seq_length=12)
    pieces, starts, ends, starts_word = preprocessor.tokenize_with_offsets(
        tf.constant(["Hello world!"]))
    assert starts.dtype == ends.dtype == tf.int32
    text = b"Hello world!"
    words = [text[s:e] for s, e, f in zip(starts[0].numpy(), ends[0].numpy(),
                                          starts_word[0].numpy()) if f]
    assert words == [b"H", b"wor", b"!"]  # the first pieces of "Hello", " world", "!"
    assert pieces.to_list() == preprocessor.tokenize(tf.constant(["Hello world!"])).to_list()
    # The same in a graph (an exported SQuAD model's), with added tokens and NFC.
    texts = tf.constant(["a [MASK] Cafe\u0301 |||IP_ADDRESS||| x", ""])
    graph = tf.function(preprocessor.tokenize_with_offsets,
                        input_signature=[tf.TensorSpec([None], tf.string)])
    for eager, traced in zip(preprocessor.tokenize_with_offsets(texts), graph(texts)):
        assert eager.to_list() == traced.to_list()


def test_offsets_with_a_prefix_space_are_refused(tmp_path):
    path = _edited(tmp_path, lambda c: c["pre_tokenizer"].update(add_prefix_space=True))
    with pytest.raises(NotImplementedError, match="add_prefix_space=true"):
        ByteLevelBpeTokenizer(read_tokenizer_json(path)).tokenize_with_offsets(tf.constant(["a"]))


def _edited(tmp_path, edit):
    with open(TOKENIZER_JSON, encoding="utf-8") as f:
        config = json.load(f)
    edit(config)
    path = str(tmp_path / "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    return path


@pytest.mark.parametrize("edit,message", [
    (lambda c: c["model"].update(type="WordPiece"), 'model.type="WordPiece" is not supported'),
    (lambda c: c.update(normalizer={"type": "Lowercase"}), "normalizer="),
    (lambda c: c.update(pre_tokenizer={"type": "Metaspace"}), "pre_tokenizer="),
    (lambda c: c["model"].update(dropout=0.1), "model.dropout=0.1"),
    (lambda c: c["model"]["merges"].reverse(), r"model.merges\[0\] uses"),
    (lambda c: c["model"]["vocab"].pop("Ġ"), "lacks the byte-level symbols"),
    (lambda c: c["added_tokens"][-1].update(single_word=True), r"\[unused3\]'\]\.single_word"),
    (lambda c: c.update(post_processor=None), "post_processor=null is not supported"),
])
def test_unsupported_settings_are_refused_naming_the_field(tmp_path, edit, message):
    with pytest.raises(ValueError, match=message) as error:
        read_tokenizer_json(_edited(tmp_path, edit))
    assert "tokenizer.json" in str(error.value)


def test_a_prefix_space_is_added_as_tokenizers_adds_it(tmp_path):
    path = _edited(tmp_path, lambda c: c["pre_tokenizer"].update(add_prefix_space=True))
    texts = TRICKY + ["[CLS]x", "x[SEP] y", " ", "a\n", "[CLS] "]
    ids = ByteLevelBpeTokenizer(read_tokenizer_json(path)).tokenize(tf.constant(texts)).to_list()
    assert ids == _hf_ids(Tokenizer.from_file(path), texts)
    plain = Tokenizer.from_file(TOKENIZER_JSON)
    assert ids[TRICKY.index("Hello world")] == _hf_ids(plain, [" Hello world"])[0]
    assert ids[TRICKY.index("Hello world")] != _hf_ids(plain, ["Hello world"])[0]


@pytest.mark.parametrize("processor", [
    {"type": "BertProcessing", "sep": ["[SEP]", 1128], "cls": ["[CLS]", 1127]},
    {"type": "RobertaProcessing", "sep": ["[SEP]", 1128], "cls": ["[CLS]", 1127],
     "trim_offsets": True, "add_prefix_space": False},
])
def test_bert_and_roberta_post_processors_pack_as_tokenizers(tmp_path, processor):
    path = _edited(tmp_path, lambda c: c.update(post_processor=processor))
    preprocessor = TextPreprocessor.from_tokenizer_json(path, max_seq_length=64)
    inputs = preprocessor(tf.constant(["Hello world"]), tf.constant(["It's  fine"]))
    encoding = Tokenizer.from_file(path).encode("Hello world", "It's  fine")
    assert inputs["token_ids"].numpy().tolist() == [encoding.ids]
    assert inputs["segment_ids"].numpy().tolist() == [encoding.type_ids]



def test_stripping_tokens_beside_whitespace_tokens_are_refused(tmp_path):
    # [MASK] (lstrip) and the runs of spaces matched in the same text: refused,
    # as kbert would take the spaces into [MASK] where tokenizers keeps them.
    path = _edited(tmp_path, lambda c: [t.update(normalized=True) for t in c["added_tokens"]])
    with pytest.raises(ValueError, match=r"added_tokens '\[MASK\]' \(lstrip/rstrip\) and ' +' "
                                         r"\(whitespace at an end\) are both matched in the "
                                         r"normalized text"):
        read_tokenizer_json(path)
