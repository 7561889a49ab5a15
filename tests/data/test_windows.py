"""Strided windows and the max-context rule against run_squad.py's Python loops."""

import numpy as np
import tensorflow as tf

from tests import serving_testlib as lib
from kbert.data.windows import max_context
from kbert.data.windows import strided_windows


def test_windows_and_max_context_follow_run_squad_for_many_lengths():
    rng = np.random.default_rng(0)
    num_pieces = [0, 1, 5, 6, 7, 13, 40] + rng.integers(0, 60, size=20).tolist()
    sizes = [6] * 7 + rng.integers(1, 12, size=20).tolist()
    strides = [2] * 7 + rng.integers(1, 14, size=20).tolist()
    windows = strided_windows(tf.constant(num_pieces), tf.constant(sizes), tf.constant(strides))
    flags = max_context(windows["piece_index"], sum(num_pieces)).to_list()
    example = windows["example"].numpy().tolist()
    piece_index = windows["piece_index"].to_list()
    row_start = np.cumsum([0] + num_pieces)
    for row, (count, size, stride) in enumerate(zip(num_pieces, sizes, strides)):
        spans = lib.run_squad_spans(count, size, stride)
        mine = [i for i, e in enumerate(example) if e == row]
        assert [(windows["window_start"].numpy()[i], windows["window_length"].numpy()[i])
                for i in mine] == spans
        for k, (index, (start, length)) in enumerate(zip(mine, spans)):
            assert piece_index[index] == list(range(row_start[row] + start, row_start[row] + start + length))
            assert flags[index] == [lib.max_context_window(spans, start + i) == k for i in range(length)]


def test_docstring_example():
    windows = strided_windows(tf.constant([7, 0]), window_size=4, stride=2)
    assert windows["window_start"].numpy().tolist() == [0, 2, 4, 0]
    assert windows["window_length"].numpy().tolist() == [4, 4, 3, 0]
    assert windows["example"].numpy().tolist() == [0, 0, 0, 1]
