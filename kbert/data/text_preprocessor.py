"""Raw text to encoder inputs with TensorFlow ops: the one tokenizer and the one packer.

`TextPreprocessor` is used everywhere kbert turns text into `token_ids`,
`segment_ids` and `padding_mask`: inside `tf.data` for fine-tuning, and inside
the graph of every exported SavedModel, so served ids equal training ids.
Tokenization is `BertWordpieceTokenizer` (google-research/bert's normalization,
then tensorflow-text's `FastBertTokenizer`) for a `vocab.txt`, or
`ByteLevelBpeTokenizer` for a Hugging Face byte-level BPE `tokenizer.json`
(ModernBERT; `from_tokenizer_json`). Packing is `[CLS] a [SEP] (b [SEP])` (a
`tokenizer.json` names its own special tokens and type ids in its
post-processor) with google-research/bert's pair truncation (`_truncate_seq_pair`: the longer
segment loses tokens first, `b` on ties), written with core ragged ops because
the SavedModel must load in TF Serving (tensorflow-text's `RoundRobinTrimmer`
gives the same lengths; tests/data/test_text_preprocessor.py checks both).
"""

from __future__ import annotations

import copy

import tensorflow as tf

from kbert.data.bert_wordpiece_tokenizer import BertWordpieceTokenizer
from kbert.data.byte_level_bpe import ByteLevelBpeTokenizer
from kbert.data.tokenizer_json import TokenizerJson
from kbert.data.tokenizer_json import read_tokenizer_json
from kbert.data.vocabulary import INPUT_TOKENS
from kbert.data.vocabulary import read_vocab


class TextPreprocessor(tf.Module):
    """Tokenizes and packs raw text into BERT inputs, in tf.data or in a serving graph.

    Batches are padded to their longest sequence (at most `max_seq_length`);
    the encoder ignores padding, so outputs do not depend on how much there is.
    Invalid UTF-8 bytes are dropped before tokenization (as
    `.decode("utf-8", "ignore")`), and text longer than the model takes is truncated.

    Args:
        vocab: list of str or None. WordPiece tokens in id order; must contain
            `[PAD]`, `[UNK]`, `[CLS]` and `[SEP]`. None with `tokenizer_json`.
        do_lower_case: bool. Lower case and strip accents (uncased models);
            False with `tokenizer_json`.
        max_seq_length: int. Longest packed sequence, special tokens included.
        name: str. Module name.
        tokenizer_json: `TokenizerJson` or None. A byte-level BPE tokenizer to
            use instead of WordPiece (see `from_tokenizer_json`).

    Example:

    >>> preprocessor = TextPreprocessor.from_vocab_file("vocab.txt", True, max_seq_length=128)
    >>> inputs = preprocessor.pack([preprocessor.tokenize(tf.constant(["a gorgeous film"]))])
    >>> inputs["token_ids"].shape
    TensorShape([1, 5])
    """

    def __init__(self, vocab: list[str] | None, do_lower_case: bool, max_seq_length: int,
                 name: str = "text_preprocessor", tokenizer_json: TokenizerJson | None = None):
        super().__init__(name=name)
        check_max_seq_length(max_seq_length)
        self.max_seq_length = int(max_seq_length)
        self.do_lower_case = bool(do_lower_case)
        if tokenizer_json is not None:
            self._init_byte_level_bpe(vocab, tokenizer_json)
            return
        missing = [token for token in INPUT_TOKENS if token not in vocab]
        if missing:
            raise ValueError(f"The vocabulary lacks {missing}; BERT inputs need {list(INPUT_TOKENS)}.")
        self.pad_id = vocab.index("[PAD]")
        self.cls_id = vocab.index("[CLS]")
        self.sep_id = vocab.index("[SEP]")
        # What a packed row holds for one and for two segments, in order:
        # `(True, segment index, segment id)` or `(False, token id, segment id)`.
        self.templates = (
            ((False, self.cls_id, 0), (True, 0, 0), (False, self.sep_id, 0)),
            ((False, self.cls_id, 0), (True, 0, 0), (False, self.sep_id, 0), (True, 1, 1),
             (False, self.sep_id, 1)))
        self.vocabulary_size = len(vocab)
        self.tokenizer = BertWordpieceTokenizer(vocab, self.do_lower_case)
        # WordPiece marks a word's later pieces with "##"; a piece without it
        # starts a word, which is how words are found again after tokenization.
        self._starts_word = tf.constant([not token.startswith("##") for token in vocab])
        self.word_prefix = ""

    def _init_byte_level_bpe(self, vocab: list[str] | None, spec: TokenizerJson) -> None:
        if vocab is not None or self.do_lower_case:
            raise ValueError(f"{spec.path} is a byte-level BPE tokenizer: it has its own "
                             "vocabulary and no lower casing; pass vocab=None, do_lower_case=False.")
        self.pad_id = _pad_id(spec)
        single = spec.single
        if len(single) != 3 or single[1][0] != "A":
            raise ValueError(f"{spec.path}: the post-processor's single template is "
                             f"{[item for item, _ in single]}; kbert packs one special token "
                             "before the text and one after it ([CLS] $A [SEP]).")
        self.cls_id, self.sep_id = single[0][0], single[2][0]
        self.templates = tuple(
            tuple((True, "AB".index(item), type_id) if isinstance(item, str)
                  else (False, item, type_id) for item, type_id in template)
            for template in (spec.single, spec.pair))
        self.vocabulary_size = len(spec.vocabulary)
        self.tokenizer = ByteLevelBpeTokenizer(spec)
        self._starts_word = None
        # Byte-level BPE marks a word that follows a space ("Ġworld"); a word
        # tokenized on its own (NER's words) gets that space so that its pieces
        # are those of running text, as RoBERTa's `add_prefix_space` does.
        self.word_prefix = " "

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
        return cls(None, False, max_seq_length, tokenizer_json=tokenizer_json)

    @classmethod
    def from_vocab_file(cls, vocab_file: str, do_lower_case: bool,
                        max_seq_length: int) -> "TextPreprocessor":
        """Builds a preprocessor over a `vocab.txt` (read and checked by `read_vocab`)."""
        return cls(read_vocab(vocab_file, INPUT_TOKENS), do_lower_case, max_seq_length)

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
        """Returns the WordPiece (or BPE) ids of each string, `[batch, (pieces)]` int32."""
        return self.tokenizer.tokenize(self.clean(texts))

    def tokenize_with_offsets(self, texts: tf.Tensor):
        """Tokenizes cleaned `texts` keeping where each piece and word is.

        Args:
            texts: string `[batch]`, already passed through `clean` (Python
                strings are valid UTF-8, so they need not be).

        Returns:
            `(pieces, starts, ends, starts_word)`: ragged `[batch, (pieces)]`
            ids, byte offsets into `texts` of each piece's start and end, and
            whether each piece begins a word. With a byte-level BPE a word is
            one piece of GPT-2's pre-tokenization (" world", "!") and a
            piece's offsets leave out its leading and trailing spaces
            (`ByteLevelBpeTokenizer.tokenize_with_offsets`).
        """
        if self._starts_word is None:
            # A byte-level BPE word is one piece of GPT-2's pre-tokenization.
            pieces, starts, ends, starts_word = self.tokenizer.tokenize_with_offsets(texts)
            return pieces, tf.cast(starts, tf.int32), tf.cast(ends, tf.int32), starts_word
        pieces, starts, ends = self.tokenizer.tokenize_with_offsets(texts)
        starts_word = tf.ragged.map_flat_values(tf.gather, self._starts_word, pieces)
        return pieces, tf.cast(starts, tf.int32), tf.cast(ends, tf.int32), starts_word

    def pack_ragged(self, segments: list[tf.RaggedTensor]) -> tuple[tf.RaggedTensor, tf.RaggedTensor]:
        """Packs one or two tokenized segments as `[CLS] a [SEP] (b [SEP])`, unpadded.

        (A `tokenizer.json` may place other special tokens, as its post-processor says.)

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


def _pad_id(spec: TokenizerJson) -> int:
    """The padding id of a `tokenizer.json`: its `[PAD]`, `<pad>` or `<|padding|>`."""
    for token in ("[PAD]", "<pad>", "<|padding|>"):
        token_id = spec.token_id(token)
        if token_id is not None:
            return token_id
    raise ValueError(f"{spec.path} has none of [PAD], <pad>, <|padding|>; padding needs one.")


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
