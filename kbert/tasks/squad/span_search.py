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

The answer is widened to whole words and cut from the original context, so
`context[start_char:end_char] == answer`.
"""

from __future__ import annotations

import tensorflow as tf

# Score reported when the context holds no piece to answer with (empty context);
# the same value padding positions get in `BertSpanLabeler`.
NO_ANSWER_SCORE = -1e9


def best_spans(start_logits: tf.Tensor, end_logits: tf.Tensor, windows: dict,
               max_answer_length: int) -> dict[str, tf.Tensor]:
    """Finds each example's best answer span.

    Args:
        start_logits: float32 `[windows, length]`.
        end_logits: float32 `[windows, length]`.
        windows: the dict from `kbert.tasks.squad.serving.question_context_windows`.
        max_answer_length: int. Longest answer, in pieces.

    Returns:
        Dict of `answer` (string), `start_char`, `end_char` (int32 character
        offsets into the context) and `score` (float32), each `[batch]`.
    """
    start_logits = tf.cast(start_logits, tf.float32)
    end_logits = tf.cast(end_logits, tf.float32)
    example = windows["example"]
    window_start = windows["window_start"]
    window_length = windows["window_length"]
    context_offset = windows["context_offset"]
    contexts = windows["contexts"]
    row_start = windows["row_start"]
    num_windows = tf.shape(start_logits)[0]
    length = tf.shape(start_logits)[1]
    batch = tf.shape(contexts)[0]
    num_pieces = tf.size(windows["piece_word"])

    local = tf.range(length)[tf.newaxis, :] - context_offset[:, tf.newaxis]
    in_context = (local >= 0) & (local < window_length[:, tf.newaxis])
    window_id = tf.broadcast_to(tf.range(num_windows)[:, tf.newaxis], tf.shape(local))
    piece = tf.gather(row_start, example)[:, tf.newaxis] + window_start[:, tf.newaxis] + local
    context_score = (tf.cast(tf.minimum(local, window_length[:, tf.newaxis] - 1 - local), tf.float32)
                     + 0.01 * tf.cast(window_length[:, tf.newaxis], tf.float32))

    # The max-context window of every context piece; the first one on ties.
    indices = tf.where(in_context)
    piece_v = tf.boolean_mask(piece, in_context)
    score_v = tf.boolean_mask(context_score, in_context)
    window_v = tf.boolean_mask(window_id, in_context)
    best_score = tf.math.unsorted_segment_max(score_v, piece_v, num_pieces)
    candidate = score_v >= tf.gather(best_score, piece_v)
    first_window = tf.math.unsorted_segment_min(
        tf.where(candidate, window_v, num_windows), piece_v, num_pieces)
    max_context_v = candidate & tf.equal(window_v, tf.gather(first_window, piece_v))
    max_context = tf.scatter_nd(indices, max_context_v, tf.shape(local, out_type=tf.int64))

    allowed = tf.linalg.band_part(tf.ones(tf.stack([length, length]), tf.bool), 0, max_answer_length - 1)
    mask = max_context[:, :, tf.newaxis] & in_context[:, tf.newaxis, :] & allowed[tf.newaxis]
    scores = start_logits[:, :, tf.newaxis] + end_logits[:, tf.newaxis, :]
    scores = tf.reshape(tf.where(mask, scores, float("-inf")), tf.stack([num_windows, length * length]))
    window_best = tf.reduce_max(scores, axis=1)
    window_arg = tf.argmax(scores, axis=1, output_type=tf.int32)

    example_best = tf.math.unsorted_segment_max(window_best, example, batch)
    chosen = tf.math.unsorted_segment_min(
        tf.where(window_best >= tf.gather(example_best, example), tf.range(num_windows), num_windows),
        example, batch)
    chosen = tf.minimum(chosen, num_windows - 1)
    # Segment max starts from the lowest float, not -inf, so test windows instead.
    found = tf.math.unsorted_segment_max(
        tf.cast(tf.math.is_finite(window_best), tf.int32), example, batch) > 0

    arg = tf.gather(window_arg, chosen)
    offset = tf.gather(row_start, tf.gather(example, chosen)) + tf.gather(window_start, chosen) - tf.gather(
        context_offset, chosen)
    # An empty context has no pieces: index one past the end of padded copies.
    piece_word = tf.concat([windows["piece_word"], [0]], 0)
    word_start = tf.concat([windows["word_start"], [0]], 0)
    word_end = tf.concat([windows["word_end"], [0]], 0)
    num_words = tf.size(windows["word_start"])
    first_word = tf.gather(piece_word, tf.where(found, offset + arg // length, num_pieces))
    last_word = tf.gather(piece_word, tf.where(found, offset + arg % length, num_pieces))
    byte_start = tf.gather(word_start, tf.where(found, first_word, num_words))
    byte_end = tf.gather(word_end, tf.where(found, last_word, num_words))

    answer = tf.strings.substr(contexts, byte_start, byte_end - byte_start)
    start_char = tf.strings.length(tf.strings.substr(contexts, tf.zeros_like(byte_start), byte_start), unit="UTF8_CHAR")
    end_char = start_char + tf.strings.length(answer, unit="UTF8_CHAR")
    return {
        "answer": tf.where(found, answer, ""),
        "start_char": tf.where(found, start_char, 0),
        "end_char": tf.where(found, end_char, 0),
        "score": tf.where(found, example_best, NO_ANSWER_SCORE),
    }
