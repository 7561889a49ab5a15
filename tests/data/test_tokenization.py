"""FastBertTokenizer vs google-research/bert's FullTokenizer semantics.

`_reference_basic_tokenize` and `_reference_wordpiece` restate the logic of the
original `tokenization.BasicTokenizer` and `WordpieceTokenizer` (clean text, pad
CJK characters, whitespace split, lower case + NFD accent strip, split on
punctuation; greedy longest-match-first WordPiece with `[UNK]` for a word that
does not split).
"""

import unicodedata

import pytest

from kbert.data import BertTokenizer
from tests.data.conftest import CAESAR_LATIN1
from tests.data.conftest import MOBY_CRLF
from tests.data.conftest import PERSUASION


def _is_whitespace(c):
    return c in " \t\n\r" or unicodedata.category(c) == "Zs"


def _is_control(c):
    if c in "\t\n\r":
        return False
    return unicodedata.category(c).startswith("C")


def _is_punctuation(c):
    cp = ord(c)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(c).startswith("P")


def _is_cjk(cp):
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def _reference_basic_tokenize(text, do_lower_case):
    cleaned = []
    for c in text:
        if ord(c) == 0 or ord(c) == 0xFFFD or _is_control(c):
            continue
        cleaned.append(" " if _is_whitespace(c) else c)
    text = "".join(f" {c} " if _is_cjk(ord(c)) else c for c in cleaned)
    tokens = []
    for word in text.split():
        if do_lower_case:
            word = word.lower()
            word = "".join(
                c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn"
            )
        current = ""
        for c in word:
            if _is_punctuation(c):
                if current:
                    tokens.append(current)
                tokens.append(c)
                current = ""
            else:
                current += c
        if current:
            tokens.append(current)
    return tokens


def _reference_wordpiece(words, vocab, max_chars=100):
    out = []
    for word in words:
        if len(word) > max_chars:
            out.append("[UNK]")
            continue
        start, pieces = 0, []
        while start < len(word):
            end = len(word)
            piece = None
            while start < end:
                candidate = ("##" if start else "") + word[start:end]
                if candidate in vocab:
                    piece = candidate
                    break
                end -= 1
            if piece is None:
                pieces = ["[UNK]"]
                break
            pieces.append(piece)
            start = end
        out.extend(pieces)
    return out


TRICKY = [
    "Hello, World! It's a test-case: (nested) [brackets] {braces} & 'quotes' \"double\".",
    "Café naïve résumé Ångström façade Crème brûlée ÉCOLE",
    "中文字符混合English文本。日本語のテキスト、かな。한국어 텍스트",
    "Tabs\tand\u00a0non-breaking\u2003spaces\u3000ideographic",
    "Control\x00chars\x07and\ufffdreplacement\u200bzero-width",
    "Punctuation…em—dash–en “curly” ‘single’ «guillemets» ¿qué? ¡sí! §5 ¶ ※",
    "Symbols $100 + 50% = ^caret^ `tick` ~tilde~ |pipe| @at #hash 3.14 1,000",
    "Combining: e\u0301 a\u0308 Ω ΣΊΣΥΦΟΣ straße İstanbul",
    "Emoji 😀 and math ∑∫ and arrows → ←",
]


def _real_lines():
    lines = []
    for path, encoding in ((PERSUASION, "utf-8"), (CAESAR_LATIN1, "latin-1"), (MOBY_CRLF, "utf-8")):
        with open(path, encoding=encoding, newline="") as f:
            lines.extend(line for line in f.read().splitlines() if line.strip())
    return lines[::7]  # A spread of real lines, kept small.


def _tokenizer_knowing(words, tmp_path, do_lower_case):
    """A tokenizer whose vocabulary holds every word whole (so WordPiece keeps words)."""
    vocab_path = tmp_path / "vocab.txt"
    vocab_path.write_text(
        "".join(t + "\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]),
        encoding="utf-8",
    )
    return BertTokenizer(str(vocab_path), do_lower_case=do_lower_case)


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_basic_tokenization_matches_original(tmp_path, do_lower_case):
    texts = TRICKY + _real_lines()
    expected = [_reference_basic_tokenize(t, do_lower_case) for t in texts]
    # A vocabulary holding every basic token: WordPiece then keeps words
    # whole, so the output is the basic tokenization.
    words = sorted({w for tokens in expected for w in tokens})
    tokenizer = _tokenizer_knowing(words, tmp_path, do_lower_case)
    got = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer.tokenize_to_ids(texts)]
    for text, want, have in zip(texts, expected, got):
        assert have == want, text
    # The tricky strings really exercise CJK splitting and accent stripping.
    assert "中" in expected[2] and "文" in expected[2]
    if do_lower_case:
        assert "cafe" in expected[1] and "naive" in expected[1]
    else:
        assert "Café" in expected[1]


def test_wordpiece_matches_original(vocab_file):
    tokenizer = BertTokenizer(vocab_file, do_lower_case=True)
    vocab = set(tokenizer.vocab)
    texts = TRICKY + _real_lines()
    got = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer.tokenize_to_ids(texts)]
    for text, have in zip(texts, got):
        want = _reference_wordpiece(_reference_basic_tokenize(text, True), vocab)
        assert have == want, text


def test_vocab_without_specials_is_refused(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\nhello\n")
    with pytest.raises(ValueError, match=r"vocab\.txt.*lacks \[SEP\], \[MASK\]"):
        BertTokenizer(str(path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        BertTokenizer(str(tmp_path / "missing.txt"))


ASCII_LINES = [
    "".join(chr(c) for c in range(128) if c != 10),  # Every ASCII character but the line feed.
    "MiXeD\tCase\rwith\x0bvertical\x0cfeed\x1fand\x7fdel\x00nul, CRLF end\r",
    "   leading and trailing spaces   ",
]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_tokenize_text_matches_original_line_by_line(tmp_path, do_lower_case):
    ascii_lines = ASCII_LINES + [line for line in _real_lines() if line.isascii()]
    all_lines = ASCII_LINES + TRICKY + _real_lines()
    expected = {t: _reference_basic_tokenize(t, do_lower_case) for t in all_lines}
    words = sorted({w for tokens in expected.values() for w in tokens})
    tokenizer = _tokenizer_knowing(words, tmp_path, do_lower_case)
    # ASCII-only text takes the bytes.translate path, the rest the string ops.
    for lines in (ascii_lines, all_lines):
        text = "\n".join(lines).encode("utf-8")
        assert text.isascii() == (lines is ascii_lines)
        got = tokenizer.tokenize_text(text)
        assert len(got.row_splits) == len(lines) + 1 and got.num_truncated == 0
        for i, line in enumerate(lines):
            ids = got.flat_ids[got.row_splits[i] : got.row_splits[i + 1]].tolist()
            assert tokenizer.convert_ids_to_tokens(ids) == expected[line], line
    if do_lower_case:
        assert "abcdefghijklmnopqrstuvwxyz" in expected[ASCII_LINES[0]]


def test_normalize_ascii_equals_normalize_text():
    import tensorflow as tf

    from kbert.data.tokenizers.bert_wordpiece_tokenizer import normalize_ascii
    from kbert.data.tokenizers.bert_wordpiece_tokenizer import normalize_text

    text = bytes(range(128)) * 2
    for do_lower_case in (True, False):
        want = normalize_text(tf.constant(text), do_lower_case).numpy()
        # The string ops turn tab, line feed and carriage return into spaces;
        # normalize_ascii keeps them for the tokenizer, which splits on them.
        got = normalize_ascii(text, do_lower_case).translate(bytes.maketrans(b"\t\n\r", b"   "))
        assert got == want
        assert (b"abc" in got) and ((b"ABC" in got) != do_lower_case)


def test_tokenize_text_blank_lines_and_truncation(vocab_file):
    tokenizer = BertTokenizer(vocab_file, do_lower_case=True)
    lines = ["the", "", "  \t\r", "\u00a0\u3000", "\x00", "ab" * 8, "é" * 9, "one"]
    got = tokenizer.tokenize_text("\n".join(lines).encode("utf-8"), max_line_chars=6)
    # Blank as Python's str.strip() sees it; a NUL-only line is not blank.
    assert got.blank.tolist() == [False, True, True, True, False, False, False, False]
    assert got.num_truncated == 2
    lengths = (got.row_splits[1:] - got.row_splits[:-1]).tolist()
    assert lengths[:5] == [1, 0, 0, 0, 0]
    cut = tokenizer.tokenize_to_ids(["ababab", "éééééé"])
    rows = [got.flat_ids[got.row_splits[i] : got.row_splits[i + 1]].tolist() for i in (5, 6)]
    assert rows == cut


def test_vocab_path_that_is_a_directory_is_named_with_the_file_inside(tmp_path):
    from kbert.data.vocabulary import vocab_sha256

    with pytest.raises(ValueError, match=rf"^vocabulary file '{tmp_path}' is a directory, not a "
                                         r"vocab.txt; pass the vocab.txt itself"):
        BertTokenizer(str(tmp_path))
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
    for read in (BertTokenizer, vocab_sha256):
        with pytest.raises(ValueError, match=rf"is a directory, not a vocab.txt; pass "
                                             rf"{tmp_path}/vocab.txt\.$"):
            read(str(tmp_path))
