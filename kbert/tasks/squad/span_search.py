"""In-graph answer search for span question answering over strided context windows.

`run_squad.py` picks answers in Python after the model ran; a served model
must do it in the graph, so this re-states its rules with TensorFlow ops:

- a start position counts only in the window where that context piece has the
  most context on both sides (`_check_is_max_context`; first window on ties);
- the end lies in the same window's context, at or after the start, and the
  span is at most `max_answer_length` pieces;
- the span score is `start_logit + end_logit`, and the best span over all of an
  example's windows wins (searched exhaustively rather than over the top-20
  starts and ends, which is what `run_squad.py` approximates).

The search is two steps so that it runs window by window as the model does
(`ServingModule.run_windows`): `window_best_spans` scores each start against
the `max_answer_length` ends after it (`[windows, length, max_answer_length]`,
whatever the window length, shorter than `max_answer_length` included), and
`best_spans` picks each example's best window. The answer is widened to whole
words and cut from the original context, so `context[start_char:end_char] ==
answer`.
"""

from __future__ import annotations

import tensorflow as tf

# Score reported when the context holds no piece to answer with (an empty or
# whitespace-only context); the same value padding positions get in `BertSpanLabeler`.
NO_ANSWER_SCORE = -1e9


def window_best_spans(start_logits: tf.Tensor, end_logits: tf.Tensor, context_offset: tf.Tensor,
                      window_length: tf.Tensor, max_context: tf.Tensor,
                      max_answer_length: int) -> list[tf.Tensor]:
    """Finds each window's best span.

    Args:
        start_logits: float `[windows, length]`, over the packed input.
        end_logits: float `[windows, length]`.
        context_offset: int32 `[windows]`. Position of the first context piece.
        window_length: int32 `[windows]`. Context pieces in the window.
        max_context: bool `[windows, pieces]` (any `pieces`, padded with False):
            whether context piece `i` of the window may start an answer here.
        max_answer_length: int. Longest answer, in pieces.

    Returns:
        `[score, first, last]`, each `[windows]`: the best span's score (-inf
        when the window has no allowed start) and its first and last piece,
        counted from the window's first context piece.

    Example:

    >>> score, first, last = window_best_spans(start, end, offset, length, max_context, 30)
    """
    start_logits = tf.cast(start_logits, tf.float32)
    end_logits = tf.cast(end_logits, tf.float32)
    length = tf.shape(start_logits)[1]
    local = tf.range(length)[tf.newaxis, :] - context_offset[:, tf.newaxis]
    in_context = (local >= 0) & (local < window_length[:, tf.newaxis])
    # One False column keeps the gather in range when no window has a piece.
    max_context = tf.pad(max_context, [[0, 0], [0, 1]])
    last_column = tf.shape(max_context)[1] - 1
    may_start = in_context & tf.gather(max_context, tf.clip_by_value(local, 0, last_column),
                                       batch_dims=1)
    # End k pieces after each start, k < max_answer_length: [windows, length, k].
    offsets = tf.range(max_answer_length)
    end_position = tf.minimum(tf.range(length)[:, tf.newaxis] + offsets, length - 1)
    end_in_context = (local[:, :, tf.newaxis] + offsets) < window_length[:, tf.newaxis, tf.newaxis]
    scores = start_logits[:, :, tf.newaxis] + tf.gather(end_logits, end_position, axis=1)
    allowed = may_start[:, :, tf.newaxis] & end_in_context
    scores = tf.where(allowed, scores, float("-inf"))
    scores = tf.reshape(scores, tf.stack([tf.shape(scores)[0], length * max_answer_length]))
    # argmax takes the first best: the earliest start, then the shortest span.
    best = tf.argmax(scores, axis=1, output_type=tf.int32)
    first = best // max_answer_length
    last = first + best % max_answer_length
    return [tf.reduce_max(scores, axis=1), first - context_offset, last - context_offset]


def best_spans(window_score: tf.Tensor, window_first: tf.Tensor, window_last: tf.Tensor,
               windows: dict) -> dict[str, tf.Tensor]:
    """Picks each example's best window and cuts its answer from the context.

    Args:
        window_score: float32 `[windows]`, from `window_best_spans`.
        window_first: int32 `[windows]`. First piece of each window's span,
            from the window's first context piece.
        window_last: int32 `[windows]`. Its last piece.
        windows: the dict from `kbert.tasks.squad.serving.question_context_windows`.

    Returns:
        Dict of `answer` (string), `start_char`, `end_char` (int32 character
        offsets into the context) and `score` (float32), each `[batch]`; an
        example without any piece answers "" with `NO_ANSWER_SCORE`.
    """
    example = windows["example"]
    contexts = windows["contexts"]
    num_windows = tf.size(example)
    batch = tf.shape(contexts)[0]
    num_pieces = tf.size(windows["piece_word"])

    example_best = tf.math.unsorted_segment_max(window_score, example, batch)
    chosen = tf.math.unsorted_segment_min(
        tf.where(window_score >= tf.gather(example_best, example), tf.range(num_windows), num_windows),
        example, batch)
    chosen = tf.minimum(chosen, num_windows - 1)
    # Segment max starts from the lowest float, not -inf, so test windows instead.
    found = tf.math.unsorted_segment_max(
        tf.cast(tf.math.is_finite(window_score), tf.int32), example, batch) > 0

    base = tf.gather(windows["row_start"], tf.gather(example, chosen)) + tf.gather(
        windows["window_start"], chosen)
    # An empty context has no pieces: index one past the end of padded copies.
    piece_word = tf.concat([windows["piece_word"], [0]], 0)
    word_start = tf.concat([windows["word_start"], [0]], 0)
    word_end = tf.concat([windows["word_end"], [0]], 0)
    num_words = tf.size(windows["word_start"])
    first_word = tf.gather(piece_word, tf.where(found, base + tf.gather(window_first, chosen), num_pieces))
    last_word = tf.gather(piece_word, tf.where(found, base + tf.gather(window_last, chosen), num_pieces))
    byte_start = tf.gather(word_start, tf.where(found, first_word, num_words))
    byte_end = tf.gather(word_end, tf.where(found, last_word, num_words))

    answer = tf.strings.substr(contexts, byte_start, byte_end - byte_start)
    start_char = tf.strings.length(tf.strings.substr(contexts, tf.zeros_like(byte_start), byte_start),
                                   unit="UTF8_CHAR")
    end_char = start_char + tf.strings.length(answer, unit="UTF8_CHAR")
    return {
        "answer": tf.where(found, answer, ""),
        "start_char": tf.where(found, start_char, 0),
        "end_char": tf.where(found, end_char, 0),
        "score": tf.where(found, example_best, NO_ANSWER_SCORE),
    }
