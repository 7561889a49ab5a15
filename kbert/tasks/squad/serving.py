"""Serving signatures of span question answering: question and context in, answer out.

`serving_default`: `question`, `context` -> `answer`, `start_char`, `end_char`,
`score`; `serve_ids` returns `start_logits` and `end_logits`. Contexts longer
than one window are split into strided windows in the graph (as `run_squad.py`),
the model reads them a bounded number at a time (`ServingModule.run_windows`),
and the best span over all windows wins (`span_search`): time and memory grow
linearly with the context.
"""

from __future__ import annotations

import tensorflow as tf

from kbert.data.text_preprocessor import TextPreprocessor
from kbert.data.text_preprocessor import column
from kbert.data.windows import max_context
from kbert.data.windows import strided_windows
from kbert.tasks.serving import IDS_SIGNATURE
from kbert.tasks.serving import ServingModule
from kbert.tasks.serving import Signature
from kbert.tasks.serving import ids_inputs
from kbert.tasks.serving import text_spec
from kbert.tasks.serving import window_preprocessor
from kbert.tasks.serving import rows_between
from kbert.tasks.squad.span_search import best_spans
from kbert.tasks.squad.span_search import window_best_spans


def question_context_windows(preprocessor: TextPreprocessor, questions: tf.Tensor,
                             contexts: tf.Tensor, max_query_length: int, doc_stride: int) -> dict:
    """Packs `[CLS] question [SEP] context window [SEP]` for every window of every example.

    Contexts longer than fits are split into windows `doc_stride` pieces
    apart, as `run_squad.py` does (`max_tokens_for_doc = max_seq_length -
    len(question) - 3`); `kbert.data.windows` cuts them and finds each
    piece's max-context window.

    Args:
        preprocessor: `TextPreprocessor`.
        questions: string `[batch]`.
        contexts: string `[batch]`.
        max_query_length: int. Question pieces kept.
        doc_stride: int. Distance between window starts, in pieces.

    Returns:
        A dict: `token_ids`, `segment_ids` (ragged int32 `[windows,
        (length)]`), `example` (int32 `[windows]`, the example each window
        belongs to), `window_start` and `window_length` (in context pieces),
        `context_offset` (where the context starts in `token_ids`),
        `max_context` (ragged bool `[windows, (window_length)]`: the piece may
        start an answer in this window), `contexts` (cleaned),
        `piece_starts`, `piece_ends` (byte offsets of every context piece,
        flat over the batch), `piece_word` (the flat word index of each
        piece), `word_start`, `word_end` (byte offsets of every word) and
        `row_start` (the flat index of each example's first piece).

    Example:

    >>> windows = question_context_windows(preprocessor, tf.constant(["who?"]),
    ...                                    tf.constant(["Emma married Mr Knightley."]), 64, 128)
    >>> windows["window_length"].numpy()
    array([6], dtype=int32)
    """
    contexts = preprocessor.clean(contexts)
    question = preprocessor.tokenize(questions)[:, :max_query_length]
    pieces, starts, ends, starts_word = preprocessor.tokenize_with_offsets(contexts)
    question_length = tf.cast(question.row_lengths(axis=1), tf.int32)
    context_length = tf.cast(pieces.row_lengths(axis=1), tf.int32)
    windows = strided_windows(context_length, preprocessor.max_seq_length - question_length - 3,
                              doc_stride)
    example = windows["example"]
    piece_index = windows["piece_index"]
    window_pieces = tf.gather(pieces.flat_values, piece_index)
    window_question = tf.gather(question, example)
    count = tf.size(example, out_type=tf.int64)
    cls, sep = preprocessor.cls_id, preprocessor.sep_id
    token_ids = tf.concat([column(count, cls), window_question, column(count, sep),
                           window_pieces, column(count, sep)], axis=1)
    segment_ids = tf.concat([column(count, 0), tf.zeros_like(window_question), column(count, 0),
                             tf.ones_like(window_pieces), column(count, 1)], axis=1)
    word_flags = tf.cast(starts_word.flat_values, tf.int32)
    piece_word = tf.cumsum(word_flags) - 1
    num_words = tf.reduce_sum(word_flags)
    return {
        "token_ids": token_ids,
        "segment_ids": segment_ids,
        "example": example,
        "window_start": windows["window_start"],
        "window_length": windows["window_length"],
        "context_offset": tf.gather(question_length, example) + 2,
        "max_context": max_context(piece_index, tf.size(piece_word)),
        "contexts": contexts,
        "piece_starts": starts.flat_values,
        "piece_ends": ends.flat_values,
        "piece_word": piece_word,
        "word_start": tf.boolean_mask(starts.flat_values, starts_word.flat_values),
        "word_end": tf.math.unsorted_segment_max(ends.flat_values, piece_word, num_words),
        "row_start": tf.cast(pieces.row_starts(), tf.int32),
    }


class SpanLabelerServingModule(ServingModule):
    """Question and context in; the best answer span of the context out.

    Args:
        model: `kbert.models.BertSpanLabeler`.
        preprocessor: `kbert.data.TextPreprocessor`.
        max_query_length: int. Question pieces kept.
        doc_stride: int. Distance between context windows, in pieces.
        max_answer_length: int. Longest answer, in pieces.

    Example:

    >>> module = SpanLabelerServingModule(qa_model, preprocessor, 64, 128, 30)
    >>> module.signatures()["serving_default"](question=q, context=c)["answer"]
    """

    def __init__(self, model, preprocessor, max_query_length: int, doc_stride: int,
                 max_answer_length: int):
        super().__init__(model, window_preprocessor(model, preprocessor))
        preprocessor = self.preprocessor
        if max_query_length > preprocessor.max_seq_length - 4:
            raise ValueError(
                f"max_query_length={max_query_length} leaves no room for context in "
                f"max_seq_length={preprocessor.max_seq_length}; it must be at most "
                f"{preprocessor.max_seq_length - 4}.")
        for name, value in (("doc_stride", doc_stride), ("max_answer_length", max_answer_length)):
            if value < 1:
                raise ValueError(f"{name}={value}; it must be at least 1 piece.")
        self.max_query_length = int(max_query_length)
        self.doc_stride = int(doc_stride)
        self.max_answer_length = int(max_answer_length)

    def declared_signatures(self):
        # Whole, not split: `serving_default` loops over windows, and the model gives two
        # outputs (start and end logits), not the one a split's `after` takes.
        return {"serving_default": Signature([text_spec("question"), text_spec("context")],
                                             body=self._serve_text, windowed=True),
                "serve_ids": Signature(IDS_SIGNATURE, body=self._serve_ids)}

    def _serve_text(self, question, context):
        windows = question_context_windows(self.preprocessor, question, context,
                                           self.max_query_length, self.doc_stride)

        def keep(outputs, inputs, begin, end):
            return window_best_spans(
                outputs["start_logits"], outputs["end_logits"],
                windows["context_offset"][begin:end], windows["window_length"][begin:end],
                rows_between(windows["max_context"], begin, end).to_tensor(default_value=False),
                self.max_answer_length)

        specs = [tf.TensorSpec([None], tf.float32), tf.TensorSpec([None], tf.int32),
                 tf.TensorSpec([None], tf.int32)]
        scores, first, last = self.run_windows(windows["token_ids"], windows["segment_ids"], keep, specs)
        return best_spans(scores, first, last, windows)

    def _serve_ids(self, token_ids, segment_ids, padding_mask):
        outputs = self.run(ids_inputs(token_ids, segment_ids, padding_mask))
        return {"start_logits": tf.cast(outputs["start_logits"], tf.float32),
                "end_logits": tf.cast(outputs["end_logits"], tf.float32)}
