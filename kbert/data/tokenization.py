"""Pre-training's tokenizers: vocabulary checks and Python lists around kbert's tokenizers.

`pretraining_tokenizer(path)` is the one the data tool uses for a tokenizer
file: `BertTokenizer` for a WordPiece `vocab.txt`, `BpeTokenizer` for a
byte-level BPE `tokenizer.json` (ModernBERT's). Both cut a chunk of text into
lines and tokenize them in one call (`tokenize_text`).

WordPiece ids come from `kbert.data.BertWordpieceTokenizer` (the original BERT
normalization, then tensorflow-text's `FastBertTokenizer`), the same
construction fine-tuning and serving use. It matches google-research/bert's
`tokenization.FullTokenizer` on punctuation, CJK characters, accents and
control characters (tested in `tests/data/test_tokenization.py`). Byte-level
BPE ids come from `kbert.data.ByteLevelBpeTokenizer`, what fine-tuning and
serving use, which gives Hugging Face `tokenizers`' ids.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
import tensorflow as tf

from kbert.data.text_files import MAX_LINE_CHARS
from kbert.data.tokenizers.bert_wordpiece_tokenizer import BertWordpieceTokenizer
from kbert.data.tokenizers.byte_level_bpe import ByteLevelBpeTokenizer
from kbert.data.tokenizers.loading import tokenizer_class
from kbert.data.tokenizers.bert_wordpiece_tokenizer import normalize_ascii
from kbert.data.tokenizers.bert_wordpiece_tokenizer import normalize_text
from kbert.data.vocabulary import PRETRAINING_TOKENS
from kbert.data.vocabulary import read_vocab

PRETRAINING_PURPOSE = "pre-training needs [UNK], [CLS], [SEP] and [MASK]"
# What Python's `str.strip()` removes: a line of only these is blank (ends a
# document), as in the original, which strips each line.
_BLANK_LINE_PATTERN = r"[\t-\r\x{1c}-\x{1f}\x{85}\p{Z}]*"


@dataclasses.dataclass
class TokenizedLines:
    """Token ids of the lines of a text.

    Args:
        flat_ids: int64 array. The ids of all lines, in order.
        row_splits: int64 array `[num_lines + 1]`. Line i is
            `flat_ids[row_splits[i]:row_splits[i + 1]]`.
        blank: bool array `[num_lines]`. Lines of only whitespace.
        num_truncated: int. Lines cut to `MAX_LINE_CHARS` characters.
    """

    flat_ids: np.ndarray
    row_splits: np.ndarray
    blank: np.ndarray
    num_truncated: int


class BertTokenizer:
    """BERT WordPiece tokenizer built from a `vocab.txt`.

    A thin wrapper around `kbert.data.BertWordpieceTokenizer` that also checks
    the special tokens the pre-training tools need, knows their ids, and
    converts to Python lists for the example generator.

    Args:
        vocab_file: str. One token per line; must contain `[UNK]`, `[CLS]`,
            `[SEP]` and `[MASK]`.
        do_lower_case: bool. Lower case and strip accents (uncased models).
            Defaults to True.

    Example:

    >>> tokenizer = kbert.data.BertTokenizer("vocab.txt", do_lower_case=True)
    >>> tokenizer.tokenize_to_ids(["Hello, world!"])
    [[7592, 1010, 2088, 999]]
    """

    def __init__(self, vocab_file: str, do_lower_case: bool = True):
        self.vocab_file = vocab_file
        self.do_lower_case = do_lower_case
        self.vocab = read_vocab(vocab_file, PRETRAINING_TOKENS, PRETRAINING_PURPOSE)
        self.token_to_id = {token: i for i, token in enumerate(self.vocab)}
        self.unk_id = self.token_to_id["[UNK]"]
        self.cls_id = self.token_to_id["[CLS]"]
        self.sep_id = self.token_to_id["[SEP]"]
        self.mask_id = self.token_to_id["[MASK]"]
        self.pad_id = self.token_to_id.get("[PAD]", 0)
        self._tokenizer = BertWordpieceTokenizer(self.vocab, do_lower_case, token_out_type=tf.int64)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def tokenize(self, text: tf.Tensor) -> tf.RaggedTensor:
        """Tokenizes a string tensor to int64 ids.

        Args:
            text: string `tf.Tensor` of shape `[batch]`.

        Returns:
            int64 `tf.RaggedTensor` of shape `[batch, (num_tokens)]` (word
            pieces of all words of a string, in order).
        """
        return self._tokenizer.tokenize(text)

    def tokenize_to_ids(self, lines: Sequence[str]) -> list[list[int]]:
        """Tokenizes Python strings to lists of ids (one list per line)."""
        if not lines:
            return []
        ids = self.tokenize(tf.constant(list(lines)))
        flat = ids.flat_values.numpy().tolist()
        splits = ids.row_splits.numpy()
        return [flat[a:b] for a, b in zip(splits[:-1].tolist(), splits[1:].tolist())]

    def tokenize_text(self, text: bytes, max_line_chars: int = MAX_LINE_CHARS) -> TokenizedLines:
        """Tokenizes each line of a UTF-8 text; the same ids as `tokenize` per line.

        One call per ~1 MB of text: lines are split, cut and tokenized by
        TensorFlow ops, and ASCII text (most corpora) is normalized with
        `normalize_ascii` instead of the Unicode string ops.

        Args:
            text: bytes. UTF-8 text, lines separated by `\\n` (a `\\r`
                before it is whitespace).
            max_line_chars: int. Longer lines are cut to this many
                characters. Defaults to `MAX_LINE_CHARS`.

        Returns:
            `TokenizedLines`; the text's last line is the one after its last
            `\\n` (empty when it ends in one).

        Example:

        >>> tokenizer.tokenize_text(b"Hello, world!\\n\\nBye.\\n").row_splits
        array([0, 4, 4, 6, 6])
        """
        is_ascii = text.isascii()
        raw_lines = tf.strings.split(tf.constant(text), "\n")
        if is_ascii:
            lines = tf.strings.split(tf.constant(normalize_ascii(text, self.do_lower_case)), "\n")
            lines, num_truncated = _truncate(lines, max_line_chars, "BYTE")
        else:
            lines, num_truncated = _truncate(raw_lines, max_line_chars, "UTF8_CHAR")
            lines = normalize_text(lines, self.do_lower_case)
        ids = self._tokenizer.tokenize_normalized(lines)
        row_splits = ids.row_splits.numpy()
        blank = np.zeros(len(row_splits) - 1, bool)
        # Only a line without tokens can be blank.
        empty = np.nonzero(row_splits[1:] == row_splits[:-1])[0]
        if empty.size:
            blank[empty] = tf.strings.regex_full_match(
                tf.gather(raw_lines, empty), _BLANK_LINE_PATTERN).numpy()
        return TokenizedLines(ids.flat_values.numpy(), row_splits, blank, num_truncated)

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return [self.vocab[i] for i in ids]


class BpeTokenizer:
    """A byte-level BPE `tokenizer.json` for pre-training data: `BertTokenizer`'s interface.

    Each line is stripped (Python's `str.strip`, as the tokenizer learner
    reads lines, `kbert-vocab build --tokenizer=bpe`) and tokenized on its own
    by `kbert.data.ByteLevelBpeTokenizer` (Hugging Face `tokenizers`' ids, as
    fine-tuning and serving tokenize), so a line's first word has no leading
    space ("The", not "ĠThe"), as a text's first word in fine-tuning.

    Args:
        tokenizer_file: str. A byte-level BPE `tokenizer.json` with `[CLS]`,
            `[SEP]` (its post-processor's) and `[MASK]`.

    Example:

    >>> tokenizer = kbert.data.BpeTokenizer("bpe/tokenizer.json")
    >>> tokenizer.convert_ids_to_tokens(tokenizer.tokenize_to_ids(["Hello, world!"])[0])
    ['Hello', ',', 'Ġworld', '!']
    """

    def __init__(self, tokenizer_file: str):
        self.vocab_file = tokenizer_file
        self.do_lower_case = None  # Byte-level BPE has no lower casing.
        self._tokenizer = ByteLevelBpeTokenizer.from_file(tokenizer_file)
        if self._tokenizer.mask_id is None:
            raise ValueError(f"tokenizer file {tokenizer_file!r} has no [MASK] (or <mask>) token; "
                             "masked-LM pre-training needs one (kbert-vocab build --tokenizer=bpe "
                             "writes one).")
        self.vocab = self._tokenizer.vocabulary
        self.cls_id, self.sep_id = self._tokenizer.cls_id, self._tokenizer.sep_id
        self.mask_id, self.pad_id = self._tokenizer.mask_id, self._tokenizer.pad_id
        self._traced = tf.function(self._tokenizer.tokenize,
                                   input_signature=[tf.TensorSpec([None], tf.string)])
        self._calls = 0

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def tokenize_to_ids(self, lines: Sequence[str]) -> list[list[int]]:
        """Tokenizes Python strings (each stripped) to lists of ids (one list per line)."""
        if not lines:
            return []
        ids = self._tokenize(tf.constant([line.strip() for line in lines]))
        flat = ids.flat_values.numpy().tolist()
        splits = ids.row_splits.numpy().tolist()
        return [flat[a:b] for a, b in zip(splits[:-1], splits[1:])]

    def tokenize_text(self, text: bytes, max_line_chars: int = MAX_LINE_CHARS) -> TokenizedLines:
        """Tokenizes each line of a UTF-8 text, cut to `max_line_chars` characters and stripped.

        Args:
            text: bytes. UTF-8 text, lines separated by `\\n`.
            max_line_chars: int. Longer lines are cut to this many
                characters. Defaults to `MAX_LINE_CHARS`.

        Returns:
            `TokenizedLines`; a line of only whitespace is blank.
        """
        lines = text.decode("utf-8").split("\n")
        num_truncated = sum(len(line) > max_line_chars for line in lines)
        lines = [line[:max_line_chars].strip() for line in lines]
        ids = self._tokenize(tf.constant(lines, tf.string))
        blank = np.array([not line for line in lines], bool)
        return TokenizedLines(ids.flat_values.numpy().astype(np.int64), ids.row_splits.numpy(),
                              blank, int(num_truncated))

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return [self.vocab[i] for i in ids]

    def _tokenize(self, lines: tf.Tensor) -> tf.RaggedTensor:
        # The first call runs eagerly: tracing costs a few eager calls, so a run
        # of one chunk (a small held-out file) never traces; later calls share
        # one trace, a little faster a chunk than eager calls.
        self._calls += 1
        return (self._tokenizer.tokenize if self._calls == 1 else self._traced)(lines)


def pretraining_tokenizer(tokenizer_file: str,
                          do_lower_case: bool = True) -> BertTokenizer | BpeTokenizer:
    """The data tool's tokenizer for a tokenizer file, of the kind its extension says.

    Args:
        tokenizer_file: str. A WordPiece `vocab.txt` or a byte-level BPE `tokenizer.json`.
        do_lower_case: bool. WordPiece's lower casing; a byte-level BPE has none.

    Returns:
        `BertTokenizer` or `BpeTokenizer`.

    Example:

    >>> type(pretraining_tokenizer("bpe/tokenizer.json")).__name__
    'BpeTokenizer'
    """
    if tokenizer_class(tokenizer_file) is ByteLevelBpeTokenizer:
        return BpeTokenizer(tokenizer_file)
    return BertTokenizer(tokenizer_file, do_lower_case=do_lower_case)


def _truncate(lines: tf.Tensor, max_chars: int, unit: str) -> tuple[tf.Tensor, int]:
    """Cuts lines longer than `max_chars` characters; returns them and how many were cut."""
    long = np.nonzero(tf.strings.length(lines).numpy() > max_chars)[0]  # Bytes >= chars.
    if unit != "BYTE" and long.size:
        chars = tf.strings.length(tf.gather(lines, long), unit=unit).numpy()
        long = long[chars > max_chars]
    if not long.size:
        return lines, 0
    cut = tf.strings.substr(tf.gather(lines, long), 0, max_chars, unit=unit)
    return tf.tensor_scatter_nd_update(lines, long[:, None], cut), int(long.size)
