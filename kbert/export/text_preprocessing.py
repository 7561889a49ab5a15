"""In-graph BERT input preparation: raw strings to `token_ids`, `segment_ids`, `padding_mask`.

Everything here is TensorFlow ops (core ops plus tensorflow-text's), so an
exported SavedModel takes raw text and needs no Python at serving time.
Tokenization is `kbert.data.BertWordpieceTokenizer`, the one pre-training and
fine-tuning use, so served ids equal training ids; the packing rules
(`[CLS] a [SEP] b [SEP]`, pair truncation that trims the longer segment first,
strided question-answering windows with the "max context" rule) are those of
google-research/bert's `run_classifier.py` and `run_squad.py`, written with core
ragged ops because no library ships them as graph ops with those exact rules.
"""

from __future__ import annotations

import tensorflow as tf

from kbert.data.bert_wordpiece_tokenizer import BertWordpieceTokenizer

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")


class TextPreprocessor(tf.Module):
    """Tokenizes and packs raw text into BERT inputs inside a TensorFlow graph.

    Batches are padded to their longest sequence (at most `max_seq_length`);
    the encoder ignores padding, so outputs do not depend on how much there is.
    Invalid UTF-8 bytes are dropped before tokenization (as `.decode("utf-8", "ignore")`), and text longer
    than the model takes is truncated.

    Args:
        vocab: list of str. WordPiece tokens in id order; must contain
            `[PAD]`, `[UNK]`, `[CLS]` and `[SEP]`.
        do_lower_case: bool. Lower case and strip accents (uncased models).
        max_seq_length: int. Longest packed sequence, special tokens included.
        name: str. Module name.

    Example:

    >>> preprocessor = TextPreprocessor(vocab, do_lower_case=True, max_seq_length=128)
    >>> inputs = preprocessor.pack([preprocessor.tokenize(tf.constant(["a gorgeous film"]))])
    >>> inputs["token_ids"].shape
    TensorShape([1, 5])
    """

    def __init__(self, vocab: list[str], do_lower_case: bool, max_seq_length: int,
                 name: str = "text_preprocessor"):
        super().__init__(name=name)
        missing = [token for token in SPECIAL_TOKENS if token not in vocab]
        if missing:
            raise ValueError(f"The vocabulary lacks {missing}; BERT inputs need {list(SPECIAL_TOKENS)}.")
        if max_seq_length < 3:
            raise ValueError(f"max_seq_length={max_seq_length}; it must leave room for [CLS] and [SEP].")
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
            texts: string `[batch]`, already passed through `clean`.

        Returns:
            `(pieces, starts, ends, starts_word)`: ragged `[batch, (pieces)]`
            ids, byte offsets into `texts` of each piece's start and end, and
            whether each piece begins a word.
        """
        pieces, starts, ends = self.tokenizer.tokenize_with_offsets(texts)
        starts_word = tf.ragged.map_flat_values(tf.gather, self._starts_word, pieces)
        return pieces, tf.cast(starts, tf.int32), tf.cast(ends, tf.int32), starts_word

    def pack(self, segments: list[tf.RaggedTensor]) -> dict[str, tf.Tensor]:
        """Packs one or two tokenized segments as `[CLS] a [SEP] (b [SEP])`.

        A pair over the limit loses tokens from its longer segment first, as
        `_truncate_seq_pair` in google-research/bert.

        Args:
            segments: one or two ragged `[batch, (pieces)]` int32 tensors.

        Returns:
            Dict of `token_ids`, `segment_ids`, `padding_mask`, int32
            `[batch, length]`.
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
            kept = [_head(first, first_keep), _head(second, second_keep)]
        batch = kept[0].nrows()
        pieces, types = [_column(batch, self.cls_id)], [_column(batch, 0)]
        for index, segment in enumerate(kept):
            pieces += [segment, _column(batch, self.sep_id)]
            types += [tf.zeros_like(segment) + index, _column(batch, index)]
        return self.to_dense(tf.concat(pieces, axis=1), tf.concat(types, axis=1))

    def to_dense(self, token_ids: tf.RaggedTensor, segment_ids: tf.RaggedTensor) -> dict[str, tf.Tensor]:
        """Pads ragged ids to the batch's longest row; returns the three encoder inputs."""
        return {
            "token_ids": token_ids.to_tensor(default_value=self.pad_id),
            "segment_ids": segment_ids.to_tensor(default_value=0),
            "padding_mask": tf.ones_like(token_ids).to_tensor(default_value=0),
        }

    def words(self, texts: tf.Tensor):
        """Tokenizes `texts` for word-level tagging (NER).

        Args:
            texts: string `[batch]`.

        Returns:
            `(inputs, first_piece_positions, word_texts)`: encoder inputs of
            `[CLS] pieces [SEP]` (truncated to `max_seq_length`), the ragged
            `[batch, (words)]` positions in `token_ids` of each kept word's
            first piece, and the ragged `[batch, (words)]` original text of
            those words.
        """
        texts = self.clean(texts)
        pieces, starts, ends, starts_word = self.tokenize_with_offsets(texts)
        kept = pieces[:, : self.max_seq_length - 2]
        kept_starts_word = starts_word[:, : self.max_seq_length - 2]
        # Positions (within the row, +1 for [CLS]) of pieces that start a word.
        positions = tf.ragged.range(kept.row_lengths(axis=1)) + 1
        first_piece_positions = tf.ragged.boolean_mask(positions, kept_starts_word)
        word_texts = self._word_texts(texts, starts, ends, starts_word, first_piece_positions)
        batch = kept.nrows()
        token_ids = tf.concat([_column(batch, self.cls_id), kept, _column(batch, self.sep_id)], 1)
        return self.to_dense(token_ids, tf.zeros_like(token_ids)), first_piece_positions, word_texts

    @staticmethod
    def _word_texts(texts, starts, ends, starts_word, first_piece_positions):
        # A word spans from its first piece's start to its last piece's end;
        # word ids are a running count of word starts over the whole batch.
        word_id = tf.cumsum(tf.cast(starts_word.flat_values, tf.int32)) - 1
        num_words = tf.reduce_sum(tf.cast(starts_word.flat_values, tf.int32))
        word_start = tf.boolean_mask(starts.flat_values, starts_word.flat_values)
        word_end = tf.math.unsorted_segment_max(ends.flat_values, word_id, num_words)
        words_per_row = tf.reduce_sum(tf.cast(starts_word, tf.int32), axis=1)
        row_of_word = tf.repeat(tf.range(tf.shape(texts)[0]), words_per_row)
        all_words = tf.strings.substr(tf.gather(texts, row_of_word), word_start, word_end - word_start)
        all_words = tf.RaggedTensor.from_row_lengths(all_words, tf.cast(words_per_row, tf.int64))
        kept_words = first_piece_positions.row_lengths(axis=1)
        return _head(all_words, kept_words)

    def question_context_windows(self, questions: tf.Tensor, contexts: tf.Tensor,
                                 max_query_length: int, doc_stride: int):
        """Packs `[CLS] question [SEP] context window [SEP]` for every window of every example.

        Contexts longer than fits are split into windows `doc_stride` pieces
        apart, as `run_squad.py` does (`max_tokens_for_doc = max_seq_length -
        len(question) - 3`).

        Args:
            questions: string `[batch]`.
            contexts: string `[batch]`.
            max_query_length: int. Question pieces kept.
            doc_stride: int. Distance between window starts, in pieces.

        Returns:
            A dict: `inputs` (encoder inputs, `[windows, length]`), `example`
            (int32 `[windows]`, the example each window belongs to),
            `window_start` and `window_length` (in context pieces),
            `context_offset` (where the context starts in `token_ids`),
            `contexts` (cleaned), `piece_starts`, `piece_ends` (byte offsets of
            every context piece, flat over the batch), `piece_word` (the flat
            word index of each piece), `word_start`, `word_end` (byte offsets
            of every word) and `row_start` (the flat index of each example's
            first piece).
        """
        contexts = self.clean(contexts)
        question = self.tokenize(questions)[:, :max_query_length]
        pieces, starts, ends, starts_word = self.tokenize_with_offsets(contexts)
        question_length = tf.cast(question.row_lengths(axis=1), tf.int32)
        context_length = tf.cast(pieces.row_lengths(axis=1), tf.int32)
        max_tokens = self.max_seq_length - question_length - 3
        stride = tf.minimum(doc_stride, max_tokens)
        extra = tf.maximum(context_length - max_tokens, 0)
        num_windows = (extra + stride - 1) // stride + 1
        example = tf.repeat(tf.range(tf.shape(contexts)[0]), num_windows)
        window_index = tf.ragged.range(num_windows).flat_values
        window_start = window_index * tf.gather(stride, example)
        window_length = tf.minimum(tf.gather(max_tokens, example),
                                   tf.gather(context_length, example) - window_start)
        row_start = tf.cast(pieces.row_starts(), tf.int32)
        flat_index = tf.ragged.range(window_start, window_start + window_length) + tf.expand_dims(
            tf.gather(row_start, example), 1)
        window_pieces = tf.gather(pieces.flat_values, flat_index)
        window_question = tf.gather(question, example)
        windows = tf.size(example, out_type=tf.int64)
        token_ids = tf.concat([_column(windows, self.cls_id), window_question, _column(windows, self.sep_id),
                               window_pieces, _column(windows, self.sep_id)], axis=1)
        segment_ids = tf.concat([_column(windows, 0), tf.zeros_like(window_question), _column(windows, 0),
                                 tf.ones_like(window_pieces), _column(windows, 1)], axis=1)
        word_flags = tf.cast(starts_word.flat_values, tf.int32)
        piece_word = tf.cumsum(word_flags) - 1
        num_words = tf.reduce_sum(word_flags)
        return {
            "inputs": self.to_dense(token_ids, segment_ids),
            "example": example,
            "window_start": window_start,
            "window_length": window_length,
            "context_offset": tf.gather(question_length, example) + 2,
            "contexts": contexts,
            "piece_starts": starts.flat_values,
            "piece_ends": ends.flat_values,
            "piece_word": piece_word,
            "word_start": tf.boolean_mask(starts.flat_values, starts_word.flat_values),
            "word_end": tf.math.unsorted_segment_max(ends.flat_values, piece_word, num_words),
            "row_start": row_start,
        }


def _head(rows: tf.RaggedTensor, keep: tf.Tensor) -> tf.RaggedTensor:
    """Keeps the first `keep[i]` items of row `i` of a ragged `[batch, (n)]` tensor."""
    keep = tf.cast(keep, tf.int64)
    mask = tf.ragged.range(rows.row_lengths(axis=1)) < tf.expand_dims(keep, 1)
    return tf.ragged.boolean_mask(rows, mask)


def _column(nrows: tf.Tensor, value: int) -> tf.RaggedTensor:
    """A ragged `[nrows, 1]` int32 column holding `value`, to concatenate with pieces."""
    return tf.RaggedTensor.from_tensor(tf.fill(tf.stack([tf.cast(nrows, tf.int64), 1]), tf.constant(value, tf.int32)))
