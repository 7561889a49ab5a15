"""Strided windows over texts longer than the model takes, in TensorFlow ops.

A text whose pieces do not fit in one model input is read as windows
`stride` pieces apart, as `run_squad.py` cuts a long context
(`start_offset += min(length, doc_stride)`), and a piece seen by several
windows is judged in the window where it has the most context on both sides
(`run_squad.py`'s `_check_is_max_context`). Served question answering and NER
use both, so that every part of a long text can be tagged or hold the answer
with work and memory linear in its length. Everything here is flat over the
batch: one sorted pass, no tensor whose size grows with the square of a text.
"""

from __future__ import annotations

import tensorflow as tf


def strided_windows(num_pieces: tf.Tensor, window_size, stride) -> dict[str, tf.Tensor]:
    """Cuts rows of `num_pieces[i]` pieces into windows, as `run_squad.py` does.

    Window `k` of a row starts at `k * min(stride, window_size)` and holds up
    to `window_size` pieces; the last window reaches the row's end. A row with
    no pieces still gets one (empty) window, so every row gets an answer.

    Args:
        num_pieces: int32 `[batch]`. Pieces in each row.
        window_size: int32 scalar or `[batch]`. Pieces one window holds; at least 1.
        stride: int32 scalar or `[batch]`. Pieces between window starts; at least 1.

    Returns:
        A dict of `example`, `window_start`, `window_length` (int32 `[windows]`:
        the row of each window, its first piece within the row, its number of
        pieces) and `piece_index` (ragged int32 `[windows, (window_length)]`:
        the index of each of its pieces in the batch's pieces laid end to end).

    Example:

    >>> windows = strided_windows(tf.constant([7, 0]), window_size=4, stride=2)
    >>> windows["window_start"].numpy(), windows["window_length"].numpy()
    (array([0, 2, 4, 0], dtype=int32), array([4, 4, 3, 0], dtype=int32))
    """
    num_pieces = tf.cast(num_pieces, tf.int32)
    size = tf.broadcast_to(tf.cast(window_size, tf.int32), tf.shape(num_pieces))
    step = tf.minimum(tf.broadcast_to(tf.cast(stride, tf.int32), tf.shape(num_pieces)), size)
    extra = tf.maximum(num_pieces - size, 0)
    num_windows = (extra + step - 1) // step + 1
    example = tf.repeat(tf.range(tf.size(num_pieces)), num_windows)
    window_start = tf.ragged.range(num_windows).flat_values * tf.gather(step, example)
    window_length = tf.minimum(tf.gather(size, example), tf.gather(num_pieces, example) - window_start)
    row_start = tf.cumsum(num_pieces, exclusive=True)
    piece_index = (tf.ragged.range(window_start, window_start + window_length)
                   + tf.expand_dims(tf.gather(row_start, example), 1))
    return {"example": example, "window_start": window_start, "window_length": window_length,
            "piece_index": piece_index}


def max_context(piece_index: tf.RaggedTensor, num_pieces: tf.Tensor) -> tf.RaggedTensor:
    """Whether each window's piece has its most context in that window.

    `run_squad.py`'s `_check_is_max_context`: a piece at position `j` of a
    window of `n` pieces scores `min(j, n - 1 - j) + 0.01 * n`; the window
    with the highest score wins, the first one on ties. Scores are float64,
    as Python computes them, so ties break as in `run_squad.py`.

    Args:
        piece_index: ragged int32 `[windows, (pieces)]`, from `strided_windows`.
        num_pieces: int32 scalar. Pieces in the batch (the range of `piece_index`).

    Returns:
        Ragged bool `[windows, (pieces)]`, True in exactly one window per piece.
    """
    lengths = tf.cast(piece_index.row_lengths(), tf.int32)
    local = tf.ragged.range(lengths).flat_values
    window = tf.cast(piece_index.value_rowids(), tf.int32)
    length = tf.gather(lengths, window)
    score = (tf.cast(tf.minimum(local, length - 1 - local), tf.float64)
             + 0.01 * tf.cast(length, tf.float64))
    piece = piece_index.flat_values
    best = tf.math.unsorted_segment_max(score, piece, num_pieces)
    candidate = score >= tf.gather(best, piece)
    num_windows = tf.size(lengths)
    first = tf.math.unsorted_segment_min(tf.where(candidate, window, num_windows), piece, num_pieces)
    return piece_index.with_flat_values(candidate & tf.equal(window, tf.gather(first, piece)))
