"""Raw text to encoder inputs with TensorFlow ops: the one tokenizer and the one packer.

`TextPreprocessor` is used everywhere kbert turns text into `token_ids`,
`segment_ids` and `padding_mask`: inside `tf.data` for fine-tuning, and inside
the graph of every exported SavedModel, so served ids equal training ids.
Tokenization is `BertWordpieceTokenizer` (google-research/bert's normalization,
then tensorflow-text's `FastBertTokenizer`). Packing is `[CLS] a [SEP] (b [SEP])`
with google-research/bert's pair truncation (`_truncate_seq_pair`: the longer
segment loses tokens first, `b` on ties), written with core ragged ops because
the SavedModel must load in TF Serving (tensorflow-text's `RoundRobinTrimmer`
gives the same lengths; tests/data/test_text_preprocessor.py checks both).
"""

from __future__ import annotations

import tensorflow as tf

from kbert.data.bert_wordpiece_tokenizer import BertWordpieceTokenizer
from kbert.data.vocabulary import INPUT_TOKENS
from kbert.data.vocabulary import read_vocab


class TextPreprocessor(tf.Module):
    """Tokenizes and packs raw text into BERT inputs, in tf.data or in a serving graph.

    Batches are padded to their longest sequence (at most `max_seq_length`);
    the encoder ignores padding, so outputs do not depend on how much there is.
    Invalid UTF-8 bytes are dropped before tokenization (as
    `.decode("utf-8", "ignore")`), and text longer than the model takes is truncated.

    Args:
        vocab: list of str. WordPiece tokens in id order; must contain
            `[PAD]`, `[UNK]`, `[CLS]` and `[SEP]`.
        do_lower_case: bool. Lower case and strip accents (uncased models).
        max_seq_length: int. Longest packed sequence, special tokens included.
        name: str. Module name.

    Example:

    >>> preprocessor = TextPreprocessor.from_vocab_file("vocab.txt", True, max_seq_length=128)
    >>> inputs = preprocessor.pack([preprocessor.tokenize(tf.constant(["a gorgeous film"]))])
    >>> inputs["token_ids"].shape
    TensorShape([1, 5])
    """

    def __init__(self, vocab: list[str], do_lower_case: bool, max_seq_length: int,
                 name: str = "text_preprocessor"):
        super().__init__(name=name)
        missing = [token for token in INPUT_TOKENS if token not in vocab]
        if missing:
            raise ValueError(f"The vocabulary lacks {missing}; BERT inputs need {list(INPUT_TOKENS)}.")
        check_max_seq_length(max_seq_length)
        self.max_seq_length = int(max_seq_length)
        self.do_lower_case = bool(do_lower_case)
        self.pad_id = vocab.index("[PAD]")
        self.cls_id = vocab.index("[CLS]")
        self.sep_id = vocab.index("[SEP]")
        self.vocabulary_size = len(vocab)
        self.tokenizer = BertWordpieceTokenizer(vocab, self.do_lower_case)
        # WordPiece marks a word's later pieces with "##"; a piece without it
        # starts a word, which is how words are found again after tokenization.
        self._starts_word = tf.constant([not token.startswith("##") for token in vocab])

    @classmethod
    def from_vocab_file(cls, vocab_file: str, do_lower_case: bool,
                        max_seq_length: int) -> "TextPreprocessor":
        """Builds a preprocessor over a `vocab.txt` (read and checked by `read_vocab`)."""
        return cls(read_vocab(vocab_file, INPUT_TOKENS), do_lower_case, max_seq_length)

    @staticmethod
    def clean(texts: tf.Tensor) -> tf.Tensor:
        """Drops invalid UTF-8 bytes, as google-research/bert's `convert_to_unicode` does."""
        return tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="ignore")

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Returns the WordPiece ids of each string, `[batch, (pieces)]` int32."""
        return self.tokenizer.tokenize(self.clean(texts))

    def tokenize_with_offsets(self, texts: tf.Tensor):
        """Tokenizes cleaned `texts` keeping where each piece and word is.

        Args:
            texts: string `[batch]`, already passed through `clean` (Python
                strings are valid UTF-8, so they need not be).

        Returns:
            `(pieces, starts, ends, starts_word)`: ragged `[batch, (pieces)]`
            ids, byte offsets into `texts` of each piece's start and end, and
            whether each piece begins a word.
        """
        pieces, starts, ends = self.tokenizer.tokenize_with_offsets(texts)
        starts_word = tf.ragged.map_flat_values(tf.gather, self._starts_word, pieces)
        return pieces, tf.cast(starts, tf.int32), tf.cast(ends, tf.int32), starts_word

    def pack_ragged(self, segments: list[tf.RaggedTensor]) -> tuple[tf.RaggedTensor, tf.RaggedTensor]:
        """Packs one or two tokenized segments as `[CLS] a [SEP] (b [SEP])`, unpadded.

        A pair over the limit loses tokens from its longer segment first, as
        `_truncate_seq_pair` in google-research/bert.

        Args:
            segments: one or two ragged `[batch, (pieces)]` int32 tensors.

        Returns:
            `(token_ids, segment_ids)`, ragged `[batch, (length)]` int32.
        """
        if len(segments) not in (1, 2):
            raise ValueError(f"pack takes one or two segments, got {len(segments)}.")
        budget = self.max_seq_length - 1 - len(segments)
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
        pieces, types = [column(batch, self.cls_id)], [column(batch, 0)]
        for index, segment in enumerate(kept):
            pieces += [tf.cast(segment, tf.int32), column(batch, self.sep_id)]
            types += [tf.zeros_like(segment, tf.int32) + index, column(batch, index)]
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
    """Keeps the first `keep[i]` items of row `i` of a ragged `[batch, (n)]` tensor."""
    keep = tf.cast(keep, tf.int64)
    mask = tf.ragged.range(rows.row_lengths(axis=1)) < tf.expand_dims(keep, 1)
    return tf.ragged.boolean_mask(rows, mask)


def column(nrows: tf.Tensor, value: int) -> tf.RaggedTensor:
    """A ragged `[nrows, 1]` int32 column holding `value`, to concatenate with pieces."""
    shape = tf.stack([tf.cast(nrows, tf.int64), 1])
    return tf.RaggedTensor.from_tensor(tf.fill(shape, tf.constant(value, tf.int32)))
