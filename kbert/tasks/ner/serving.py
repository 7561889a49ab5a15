"""Serving signatures of token classifiers (NER): raw text in, a tag per word out.

`serving_default`: `text` -> `words`, `tags` (`[batch, max_words]`, "" padded),
`num_words`; `serve_ids` returns `logits` and `tags` per position.
"""

from __future__ import annotations

import tensorflow as tf

from kbert.data.text_preprocessor import TextPreprocessor
from kbert.data.text_preprocessor import column
from kbert.data.text_preprocessor import keep_first
from kbert.tasks.serving import IDS_SIGNATURE
from kbert.tasks.serving import ServingModule
from kbert.tasks.serving import ids_inputs
from kbert.tasks.serving import label_table
from kbert.tasks.serving import text_spec


def tokenize_words(preprocessor: TextPreprocessor, texts: tf.Tensor):
    """Tokenizes `texts` for word-level tagging.

    Args:
        preprocessor: `TextPreprocessor`.
        texts: string `[batch]`.

    Returns:
        `(inputs, first_piece_positions, word_texts)`: encoder inputs of
        `[CLS] pieces [SEP]` (truncated to `max_seq_length`), the ragged
        `[batch, (words)]` positions in `token_ids` of each kept word's
        first piece, and the ragged `[batch, (words)]` original text of
        those words.
    """
    texts = preprocessor.clean(texts)
    pieces, starts, ends, starts_word = preprocessor.tokenize_with_offsets(texts)
    budget = preprocessor.max_seq_length - 2
    kept = pieces[:, :budget]
    kept_starts_word = starts_word[:, :budget]
    # Positions (within the row, +1 for [CLS]) of pieces that start a word.
    positions = tf.ragged.range(kept.row_lengths(axis=1)) + 1
    first_piece_positions = tf.ragged.boolean_mask(positions, kept_starts_word)
    word_texts = _word_texts(texts, starts, ends, starts_word, first_piece_positions)
    batch = kept.nrows()
    token_ids = tf.concat([column(batch, preprocessor.cls_id), kept,
                           column(batch, preprocessor.sep_id)], 1)
    inputs = preprocessor.to_dense(token_ids, tf.zeros_like(token_ids))
    return inputs, first_piece_positions, word_texts


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
    return keep_first(all_words, kept_words)


class TokenClassifierServingModule(ServingModule):
    """Raw text in; its words and one tag per word out.

    Args:
        model: `kbert.models.BertTokenClassifier`.
        preprocessor: `kbert.data.TextPreprocessor`.
        label_names: list of str. Tags in logit order.

    Example:

    >>> module = TokenClassifierServingModule(tagger, preprocessor, ["O", "B-PER", "I-PER"])
    >>> module.signatures()["serving_default"](tf.constant(["John lives in Paris"]))["tags"]
    """

    def __init__(self, model, preprocessor, label_names: list[str]):
        super().__init__(model, preprocessor)
        self.label_names = label_table(label_names, model.output_shape[-1])
        self.serve_text = tf.function(self._serve_text, autograph=False,
                                      input_signature=[text_spec("text")])
        self.serve_ids = tf.function(self._serve_ids, autograph=False, input_signature=IDS_SIGNATURE)

    def _serve_text(self, text):
        inputs, positions, words = tokenize_words(self.preprocessor, text)
        logits = tf.cast(self.run(inputs), tf.float32)
        rows = tf.cast(positions.value_rowids(), tf.int32)
        word_logits = tf.gather_nd(logits, tf.stack([rows, tf.cast(positions.flat_values, tf.int32)], 1))
        tags = tf.gather(self.label_names, tf.argmax(word_logits, axis=-1, output_type=tf.int32))
        tags = positions.with_flat_values(tags)
        return {
            "words": words.to_tensor(default_value=""),
            "tags": tags.to_tensor(default_value=""),
            "num_words": tf.cast(positions.row_lengths(axis=1), tf.int32),
        }

    def _serve_ids(self, token_ids, segment_ids, padding_mask):
        logits = tf.cast(self.run(ids_inputs(token_ids, segment_ids, padding_mask)), tf.float32)
        return {"logits": logits,
                "tags": tf.gather(self.label_names, tf.argmax(logits, axis=-1, output_type=tf.int32))}

    def signatures(self):
        return {"serving_default": self.serve_text, "serve_ids": self.serve_ids}
