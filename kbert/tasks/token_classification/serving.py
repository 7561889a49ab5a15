"""Serving signatures of token classifiers (NER, token classification): words in, one tag per word out.

| signature | inputs | outputs |
|---|---|---|
| `serving_default` | `text` string `[batch]` | `words`, `tags` (string `[batch, max_words]`, `""`-padded), `num_words` int32 `[batch]` |
| `words` | `words` string `[batch, max_words]`, `""`-padded | the same |
| `serve_ids` | `token_ids`, `segment_ids`, `padding_mask` | `logits`, `tags` per position (argmax, also with a CRF) |

Words are what fine-tuning calls words (`kbert.data.words`): `text` is
split on whitespace (and, for a token classifier trained with
`split_punctuation`, around each punctuation character), and each word is
tokenized on its own and tagged at its first piece. A text longer than `max_seq_length - 2` pieces is read in windows
`window_stride` pieces apart (`kbert.data.windows`); each word takes its tag
from the window where its first piece has the most context, so every word is
tagged and the work grows linearly with the text. With a CRF
(`BertTokenClassifier(crf=True)`), each word keeps its tag scores from that
window instead of a tag, and Viterbi runs over each text's words in order, as
in fine-tuning: a text of one window gets exactly the Keras model's tags, and
a longer one a valid sequence across windows too.
"""

from __future__ import annotations

import tensorflow as tf

from kbert.data.text_preprocessor import TextPreprocessor
from kbert.data.text_preprocessor import column
from kbert.data.windows import max_context
from kbert.data.windows import strided_windows
from kbert.data.words import split_words
from kbert.data.words import word_pieces
from kbert.tasks.serving import IDS_SIGNATURE
from kbert.tasks.serving import ServingModule
from kbert.tasks.serving import Signature
from kbert.tasks.serving import ids_inputs
from kbert.tasks.serving import label_table
from kbert.tasks.serving import rows_between
from kbert.tasks.serving import text_spec
from kbert.tasks.serving import window_preprocessor


def word_windows(preprocessor: TextPreprocessor, words: tf.RaggedTensor,
                 window_stride: int) -> dict:
    """Packs `[CLS] pieces [SEP]` windows over each row of words.

    Args:
        preprocessor: `TextPreprocessor`.
        words: ragged string `[batch, (words)]`.
        window_stride: int. Pieces between window starts when a row has more
            than `max_seq_length - 2` pieces.

    Returns:
        A dict: `token_ids` (ragged int32 `[windows, (length)]`), `example`,
        `window_start`, `window_length` (int32 `[windows]`, from
        `strided_windows`), `piece_index` (ragged `[windows, (pieces)]`: the
        flat index of each window piece in the batch's pieces), `first`
        (bool, flat over the batch's pieces: the piece starts its word),
        `word` (int32, flat: the flat index in `words` of each piece's word)
        and `tagged` (ragged bool `[windows, (pieces)]`: the piece starts a
        word and this window is where it has the most context).

    Example:

    >>> windows = word_windows(preprocessor, tf.ragged.constant([["EU", "rejects"]]), 64)
    >>> windows["token_ids"].to_list()
    [[101, 7327, 19164, 102]]
    """
    pieces, first, word = word_pieces(preprocessor, words)
    num_pieces = tf.cast(pieces.row_lengths(), tf.int32)
    windows = strided_windows(num_pieces, preprocessor.max_seq_length - 2, window_stride)
    piece_index = windows["piece_index"]
    window_pieces = tf.gather(pieces.flat_values, piece_index)
    count = tf.size(windows["example"], out_type=tf.int64)
    token_ids = tf.concat([column(count, preprocessor.cls_id), window_pieces,
                           column(count, preprocessor.sep_id)], axis=1)
    first = first.flat_values
    # Word indices within a row, made flat over the batch's words.
    word = word.flat_values + tf.gather(tf.cast(words.row_starts(), tf.int32),
                                        tf.cast(pieces.value_rowids(), tf.int32))
    in_best_window = max_context(piece_index, tf.size(first))
    tagged = in_best_window.with_flat_values(
        in_best_window.flat_values & tf.gather(first, piece_index.flat_values))
    return {**windows, "token_ids": token_ids, "first": first, "word": word, "tagged": tagged}


class TokenClassifierServingModule(ServingModule):
    """Raw text, or words, in; the words and one tag per word out.

    Args:
        model: `kbert.models.BertTokenClassifier`.
        preprocessor: `kbert.data.TextPreprocessor`.
        label_names: list of str. Tags in logit order; the first (`O` in
            CoNLL) also tags a word that has no pieces, as fine-tuning's
            predictions do.
        window_stride: int or None. Pieces between windows over a long text.
            Defaults to half a window, `(max_seq_length - 2) // 2`.
        split_punctuation: bool. `text` is also split around each punctuation
            character (`kbert.data.words.split_words`). Defaults to False.

    Example:

    >>> module = TokenClassifierServingModule(tagger, preprocessor, ["O", "B-PER", "I-PER"])
    >>> module.signatures()["serving_default"](tf.constant(["John lives in Paris"]))["tags"]
    """

    def __init__(self, model, preprocessor, label_names: list[str], window_stride: int | None = None,
                 split_punctuation: bool = False):
        super().__init__(model, window_preprocessor(model, preprocessor))
        self.split_punctuation = bool(split_punctuation)
        preprocessor = self.preprocessor
        self.label_names = label_table(label_names, model.output_shape[-1])
        window = preprocessor.max_seq_length - 2
        self.window_stride = int(window_stride) if window_stride else max(1, window // 2)
        if self.window_stride < 1:
            raise ValueError(f"window_stride={window_stride}; it must be at least 1 piece.")

    def declared_signatures(self):
        # Whole, not split: the text signatures loop over windows, and `serve_ids` gives
        # per-piece logits `[batch, length, tags]`, not what a split's `after` takes.
        return {"serving_default": Signature([text_spec("text")], body=self._serve_text,
                                             windowed=True),
                "words": Signature([tf.TensorSpec([None, None], tf.string, name="words")],
                                   body=self._serve_words, windowed=True),
                "serve_ids": Signature(IDS_SIGNATURE, body=self._serve_ids)}

    def _serve_text(self, text):
        return self._tag(split_words(self.preprocessor.clean(text), self.split_punctuation))

    def _serve_words(self, words):
        # A row's words end at its last non-empty one; "" after it is padding.
        present = tf.not_equal(words, "")
        positions = tf.range(1, tf.shape(words)[1] + 1)[tf.newaxis, :]
        num_words = tf.reduce_max(tf.where(present, positions, 0), axis=1)
        words = tf.RaggedTensor.from_tensor(words, lengths=num_words)
        return self._tag(words.with_flat_values(self.preprocessor.clean(words.flat_values)))

    def _tag(self, words: tf.RaggedTensor) -> dict:
        windows = word_windows(self.preprocessor, words, self.window_stride)
        token_ids = windows["token_ids"]
        tagged = windows["tagged"]

        crf = getattr(self.model, "crf_layer", None)

        def keep(logits, inputs, begin, end):
            # Scores (CRF) or tags of the tagged pieces only (one per word), in window order.
            logits = tf.cast(logits[:, 1:], tf.float32)
            mask = rows_between(tagged, begin, end).to_tensor(
                default_value=False, shape=tf.shape(logits[..., 0], out_type=tf.int64))
            if crf is not None:
                return [tf.boolean_mask(logits, mask)]
            return [tf.boolean_mask(tf.argmax(logits, axis=-1, output_type=tf.int32), mask)]

        spec = (tf.TensorSpec([None, self.label_names.shape[0]], tf.float32) if crf is not None
                else tf.TensorSpec([None], tf.int32))
        kept, = self.run_windows(token_ids, tf.zeros_like(token_ids), keep, [spec])
        tagged_pieces = tf.boolean_mask(windows["piece_index"].flat_values, tagged.flat_values)
        word = tf.gather(windows["word"], tagged_pieces)
        num_words = tf.shape(words.flat_values)[0]
        tag_ids = kept if crf is None else self._viterbi(crf, kept, word, words)
        # 0 for a word without pieces (untagged), else its tag id + 1.
        word_tag = tf.scatter_nd(word[:, tf.newaxis], tag_ids + 1, [num_words])
        tags = tf.gather(self.label_names, tf.maximum(word_tag - 1, 0))
        return {
            "words": words.to_tensor(default_value=""),
            "tags": words.with_flat_values(tags).to_tensor(default_value=""),
            "num_words": tf.cast(words.row_lengths(), tf.int32),
        }

    @staticmethod
    def _viterbi(crf, scores, word, words: tf.RaggedTensor) -> tf.Tensor:
        """Viterbi over each text's tagged words; tag ids in the order of `word`."""
        # Tagged words in text order (flat word indices grow with the row).
        order = tf.argsort(word, stable=True)
        row = tf.gather(tf.cast(words.value_rowids(), tf.int32), tf.gather(word, order))
        sequences = tf.RaggedTensor.from_value_rowids(tf.gather(scores, order), row,
                                                      nrows=tf.cast(words.nrows(), tf.int32))
        best = crf.decode(sequences.to_tensor(), tf.cast(sequences.row_lengths(), tf.int32))
        in_order = tf.RaggedTensor.from_tensor(best, lengths=sequences.row_lengths()).flat_values
        return tf.scatter_nd(order[:, tf.newaxis], in_order, tf.shape(order))

    def _serve_ids(self, token_ids, segment_ids, padding_mask):
        logits = tf.cast(self.run(ids_inputs(token_ids, segment_ids, padding_mask)), tf.float32)
        return {"logits": logits,
                "tags": tf.gather(self.label_names, tf.argmax(logits, axis=-1, output_type=tf.int32))}
