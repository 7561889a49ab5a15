"""Raw text to encoder inputs with TensorFlow ops: a tokenizer and the one packer.

`TextPreprocessor` is used everywhere kbert turns text into `token_ids`,
`segment_ids` and `padding_mask`: inside `tf.data` for fine-tuning, and inside
the graph of every exported SavedModel, so served ids equal training ids.
Tokenization is the model's `kbert.data.tokenizers.Tokenizer` (WordPiece for a
`vocab.txt`, byte-level BPE for a Hugging Face `tokenizer.json`), whatever its
kind. Packing follows the tokenizer's templates (`[CLS] a [SEP] (b [SEP])`; a
`tokenizer.json` names its own special tokens and type ids in its
post-processor) with google-research/bert's pair truncation (`_truncate_seq_pair`: the longer
segment loses tokens first, `b` on ties), written with core ragged ops because
the SavedModel must load in TF Serving (tensorflow-text's `RoundRobinTrimmer`
gives the same lengths; tests/data/test_text_preprocessor.py checks both).
"""

from __future__ import annotations

import copy

import tensorflow as tf

from kbert.data.tokenizers.byte_level_bpe import ByteLevelBpeTokenizer
from kbert.data.tokenizers.tokenizer import Template
from kbert.data.tokenizers.tokenizer import Tokenizer
from kbert.data.tokenizers.tokenizer_json import TokenizerJson
from kbert.data.tokenizers.tokenizer_json import read_tokenizer_json
from kbert.data.tokenizers.wordpiece_tokenizer import WordpieceTokenizer


class TextPreprocessor(tf.Module):
    """Tokenizes and packs raw text into encoder inputs, in tf.data or in a serving graph.

    Batches are padded to their longest sequence (at most `max_seq_length`);
    the encoder ignores padding, so outputs do not depend on how much there is.
    Invalid UTF-8 bytes are dropped before tokenization (as
    `.decode("utf-8", "ignore")`), and text longer than the model takes is truncated.

    Args:
        tokenizer: `kbert.data.tokenizers.Tokenizer`. Its ids, special tokens
            and templates (`kbert.data.tokenizers.load_tokenizer`, or a
            model directory's `tokenizer`).
        max_seq_length: int. Longest packed sequence, special tokens included.
        name: str. Module name.

    Example:

    >>> preprocessor = TextPreprocessor(load_tokenizer("minilm/"), max_seq_length=128)
    >>> inputs = preprocessor.pack([preprocessor.tokenize(tf.constant(["a gorgeous film"]))])
    >>> inputs["token_ids"].shape
    TensorShape([1, 5])
    """

    def __init__(self, tokenizer: Tokenizer, max_seq_length: int,
                 name: str = "text_preprocessor"):
        super().__init__(name=name)
        check_max_seq_length(max_seq_length)
        self.max_seq_length = int(max_seq_length)
        self.tokenizer = tokenizer

    @classmethod
    def from_vocab_file(cls, vocab_file: str, do_lower_case: bool,
                        max_seq_length: int) -> "TextPreprocessor":
        """Builds a preprocessor over a WordPiece `vocab.txt` (read and checked by `read_vocab`)."""
        return cls(WordpieceTokenizer.from_file(vocab_file, do_lower_case), max_seq_length)

    @classmethod
    def from_vocabulary(cls, vocabulary: list[str], do_lower_case: bool,
                        max_seq_length: int) -> "TextPreprocessor":
        """Builds a preprocessor over WordPiece tokens in id order (with `[PAD]`, `[UNK]`, `[CLS]`, `[SEP]`)."""
        return cls(WordpieceTokenizer(vocabulary, do_lower_case), max_seq_length)

    @classmethod
    def from_tokenizer_json(cls, tokenizer_json: str | TokenizerJson,
                            max_seq_length: int) -> "TextPreprocessor":
        """Builds a preprocessor over a Hugging Face byte-level BPE `tokenizer.json`.

        Ids equal the `tokenizers` library's with the same file; packing
        follows its post-processor (`[CLS] a [SEP] (b [SEP])` for ModernBERT)
        with kbert's truncation.

        Args:
            tokenizer_json: str or `TokenizerJson`. The file, or it read by
                `kbert.data.read_tokenizer_json`.
            max_seq_length: int. Longest packed sequence, special tokens included.

        Returns:
            The `TextPreprocessor`.

        Example:

        >>> preprocessor = TextPreprocessor.from_tokenizer_json("modernbert/tokenizer.json", 512)
        >>> preprocessor(tf.constant(["Hello world", "[MASK] is here"]))["token_ids"].shape
        TensorShape([2, 5])
        """
        if isinstance(tokenizer_json, str):
            tokenizer_json = read_tokenizer_json(tokenizer_json)
        return cls(ByteLevelBpeTokenizer(tokenizer_json), max_seq_length)

    # The tokenizer's facts, which tasks and export read from the preprocessor.
    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_id

    @property
    def cls_id(self) -> int:
        return self.tokenizer.cls_id

    @property
    def sep_id(self) -> int:
        return self.tokenizer.sep_id

    @property
    def vocabulary_size(self) -> int:
        return self.tokenizer.vocabulary_size

    @property
    def do_lower_case(self) -> bool:
        return self.tokenizer.do_lower_case

    @property
    def word_prefix(self) -> str:
        return self.tokenizer.word_prefix

    @property
    def templates(self) -> tuple[Template, Template]:
        return self.tokenizer.templates

    def __call__(self, texts: tf.Tensor, pairs: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        """Tokenizes and packs a batch of texts (or of text pairs): the encoder inputs.

        Args:
            texts: string `[batch]`.
            pairs: string `[batch]` or None. Second segments, for pair tasks.

        Returns:
            Dict of `token_ids`, `segment_ids`, `padding_mask`, int32 `[batch, length]`.
        """
        segments = [self.tokenize(texts)]
        if pairs is not None:
            segments.append(self.tokenize(pairs))
        return self.pack(segments)

    def with_max_seq_length(self, max_seq_length: int) -> "TextPreprocessor":
        """This preprocessor (the same tokenizer and tables) packing up to `max_seq_length`.

        Args:
            max_seq_length: int. Longest packed sequence, special tokens included.

        Returns:
            A shallow copy, or `self` when the length is the same.
        """
        check_max_seq_length(max_seq_length)
        if max_seq_length == self.max_seq_length:
            return self
        other = copy.copy(self)
        other.max_seq_length = int(max_seq_length)
        return other

    @staticmethod
    def clean(texts: tf.Tensor) -> tf.Tensor:
        """Drops invalid UTF-8 bytes, as google-research/bert's `convert_to_unicode` does."""
        return tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="ignore")

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Returns the tokenizer's ids of each string, `[batch, (pieces)]` int32."""
        return self.tokenizer.tokenize(self.clean(texts))

    def tokenize_with_offsets(self, texts: tf.Tensor):
        """Tokenizes cleaned `texts` keeping where each piece and word is.

        Args:
            texts: string `[batch]`, already passed through `clean` (Python
                strings are valid UTF-8, so they need not be).

        Returns:
            `(pieces, starts, ends, starts_word)`: ragged `[batch, (pieces)]`
            ids, int32 byte offsets into `texts` of each piece's start and
            end, and whether each piece begins a word
            (`Tokenizer.tokenize_with_offsets`: with a byte-level BPE a word
            is one piece of GPT-2's pre-tokenization, " world" or "!", and a
            piece's offsets leave out its leading and trailing spaces).
        """
        pieces, starts, ends, starts_word = self.tokenizer.tokenize_with_offsets(texts)
        return pieces, tf.cast(starts, tf.int32), tf.cast(ends, tf.int32), starts_word

    def pack_ragged(self, segments: list[tf.RaggedTensor]) -> tuple[tf.RaggedTensor, tf.RaggedTensor]:
        """Packs one or two tokenized segments as `[CLS] a [SEP] (b [SEP])`, unpadded.

        (Or as the tokenizer's `templates` say: a `tokenizer.json` places its
        special tokens as its post-processor does.)

        A pair over the limit loses tokens from its longer segment first, as
        `_truncate_seq_pair` in google-research/bert.

        Args:
            segments: one or two ragged `[batch, (pieces)]` int32 tensors.

        Returns:
            `(token_ids, segment_ids)`, ragged `[batch, (length)]` int32.
        """
        if len(segments) not in (1, 2):
            raise ValueError(f"pack takes one or two segments, got {len(segments)}.")
        template = self.templates[len(segments) - 1]
        budget = self.max_seq_length - (len(template) - len(segments))
        if budget < 0:
            raise ValueError(f"max_seq_length={self.max_seq_length} cannot hold the "
                             f"{len(template) - len(segments)} special tokens of a pair; "
                             "pass a larger max_seq_length.")
        if len(segments) == 1:
            kept = [segments[0][:, :budget]]
        else:
            first, second = segments
            first_length = first.row_lengths(axis=1)
            second_length = second.row_lengths(axis=1)
            budget64 = tf.constant(budget, tf.int64)
            second_keep = tf.minimum(second_length, tf.maximum(budget64 - first_length, budget64 // 2))
            first_keep = tf.minimum(first_length, budget64 - second_keep)
            kept = [keep_first(first, first_keep), keep_first(second, second_keep)]
        batch = kept[0].nrows()
        pieces, types = [], []
        for is_segment, value, type_id in template:
            if is_segment:
                pieces.append(tf.cast(kept[value], tf.int32))
                types.append(tf.zeros_like(kept[value], tf.int32) + type_id)
            else:
                pieces.append(column(batch, value))
                types.append(column(batch, type_id))
        return tf.concat(pieces, axis=1), tf.concat(types, axis=1)

    def pack(self, segments: list[tf.RaggedTensor]) -> dict[str, tf.Tensor]:
        """`pack_ragged`, padded to the batch's longest row: the three encoder inputs.

        Args:
            segments: one or two ragged `[batch, (pieces)]` int32 tensors.

        Returns:
            Dict of `token_ids`, `segment_ids`, `padding_mask`, int32
            `[batch, length]`.
        """
        return self.to_dense(*self.pack_ragged(segments))

    def to_dense(self, token_ids: tf.RaggedTensor, segment_ids: tf.RaggedTensor) -> dict[str, tf.Tensor]:
        """Pads ragged ids to the batch's longest row; returns the three encoder inputs."""
        return {
            "token_ids": token_ids.to_tensor(default_value=self.pad_id),
            "segment_ids": segment_ids.to_tensor(default_value=0),
            "padding_mask": tf.ones_like(token_ids).to_tensor(default_value=0),
        }


def check_max_seq_length(max_seq_length: int, max_positions: int | None = None) -> None:
    """Raises a clear error for a `max_seq_length` the encoder cannot take.

    Args:
        max_seq_length: int. Requested packed length.
        max_positions: int or None. The encoder's position embeddings.
    """
    if max_seq_length < 3:
        raise ValueError(f"max_seq_length={max_seq_length} is too small; it must be >= 3.")
    if max_positions is not None and max_seq_length > max_positions:
        raise ValueError(
            f"max_seq_length={max_seq_length} is larger than the encoder's {max_positions} "
            f"positions (max_position_embeddings); pass max_seq_length<={max_positions}."
        )


def keep_first(rows: tf.RaggedTensor, keep: tf.Tensor) -> tf.RaggedTensor:
    """Keeps the first `keep[i]` items of row `i` of a ragged `[batch, (n)]` tensor.

    The kept items' places in `rows.values` are one `tf.ragged.range` from
    each row's start: 25 graph nodes, where comparing `tf.ragged.range(lengths)`
    with `keep` broadcasts ragged against dense shapes (about 500 nodes, with
    their assertions). Every tf.data iterator and SavedModel that packs pairs
    instantiates this graph again, so its size is paid at each evaluation.
    """
    starts = rows.row_starts()
    keep = tf.minimum(tf.cast(keep, starts.dtype), rows.row_lengths())
    kept = tf.ragged.range(starts, starts + keep)
    return kept.with_values(tf.gather(rows.values, kept.values))


def column(nrows: tf.Tensor, value: int) -> tf.RaggedTensor:
    """A ragged `[nrows, 1]` int32 column holding `value`, to concatenate with pieces.

    Built from its row splits without validation (they are 0, 1, ..., nrows by
    construction): a third of the graph `RaggedTensor.from_tensor` makes.
    """
    nrows = tf.cast(nrows, tf.int64)
    return tf.RaggedTensor.from_row_splits(tf.fill([nrows], tf.constant(value, tf.int32)),
                                           tf.range(nrows + 1), validate=False)
