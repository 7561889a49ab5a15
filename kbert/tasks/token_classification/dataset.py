"""Token classification batches: one label per word, at the word's first wordpiece.

A training sentence longer than a row (`max_seq_length - 2` pieces) is read
as several rows of whole consecutive words (`fitting_windows`), so that no
word loses its tag. Evaluation and prediction read sentences in the windows
the served model reads (`tagging_windows`: `word_windows`, each word tagged
where it has the most context), so in-process and served tags are the same
for texts of any length.
"""

from __future__ import annotations

import weakref
from typing import Sequence

import numpy as np
import tensorflow as tf

from kbert.data.bucketing import batch_by_length
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.data.words import word_pieces
from kbert.tasks.token_classification.serving import word_windows


def token_classification_dataset(
    preprocessor: TextPreprocessor,
    sentences: Sequence[Sequence[str]],
    tag_ids: Sequence[Sequence[int]] | None,
    batch_size: int,
    is_training: bool = False,
    seed: int | None = None,
) -> tf.data.Dataset:
    """Token classification (NER) batches: one label per word, at its first wordpiece.

    Each word is tokenized on its own (`kbert.data.words.word_pieces`, as
    the served model does); its first wordpiece carries the word's tag with
    weight 1, other wordpieces and `[CLS]`/`[SEP]` weight 0. Words past
    `max_seq_length - 2` wordpieces are cut (they get no position).

    Args:
        preprocessor: `TextPreprocessor` (its `max_seq_length` bounds each row).
        sentences: list of word lists.
        tag_ids: list of tag-id lists (same shapes), or None.
        batch_size: int.
        is_training: bool. Shuffle (with `seed`) and repeat forever.
        seed: int or None.

    Returns:
        Dataset of dicts `token_ids`, `segment_ids`, `padding_mask`, `label`
        and `weight` (per position), `word_position` (word index + 1 at
        first wordpieces, 0 elsewhere) and `example_index`.

    Example:

    >>> batches = token_classification_dataset(preprocessor, [["EU", "rejects"]], [[3, 0]], 32)
    """
    count = len(sentences)
    words = tf.ragged.constant([list(s) for s in sentences], dtype=tf.string)
    if tag_ids is None:
        tag_ids = [[0] * len(s) for s in sentences]
    tags = tf.ragged.constant([list(t) for t in tag_ids], dtype=tf.int32)
    dataset = tf.data.Dataset.from_tensor_slices(
        {"words": words, "tags": tags, "example_index": tf.range(count, dtype=tf.int32)}
    )
    if is_training:
        dataset = dataset.shuffle(count, seed=seed, reshuffle_each_iteration=True).repeat()
    budget = preprocessor.max_seq_length - 2

    def encode(element):
        words = tf.RaggedTensor.from_row_lengths(element["words"], [tf.size(element["words"])])
        pieces, first, word = (rows[0] for rows in word_pieces(preprocessor, words))
        word_tags = tf.gather(element["tags"], word)
        word_numbers = word + 1
        token_ids = pieces[:budget]
        first = first[:budget]
        zero = tf.zeros([1], tf.int32)
        token_ids = tf.concat([[preprocessor.cls_id], token_ids, [preprocessor.sep_id]], 0)
        return {
            "token_ids": token_ids,
            "segment_ids": tf.zeros_like(token_ids),
            "padding_mask": tf.ones_like(token_ids),
            "label": tf.concat([zero, tf.where(first, word_tags[:budget], 0), zero], 0),
            "weight": tf.concat([zero, tf.cast(first, tf.int32), zero], 0),
            "word_position": tf.concat([zero, tf.where(first, word_numbers[:budget], 0), zero], 0),
            "example_index": element["example_index"],
        }

    dataset = dataset.map(encode, num_parallel_calls=tf.data.AUTOTUNE)
    max_seq_length = preprocessor.max_seq_length
    return batch_by_length(dataset, batch_size, max_seq_length).prefetch(tf.data.AUTOTUNE)


def fitting_windows(piece_counts: Sequence[int], budget: int) -> list[tuple[int, int]]:
    """Consecutive whole words that fit `budget` pieces together: `(start, end)` word ranges.

    Words are taken greedily left to right; a word longer than `budget` on its
    own is a window of its own (its pieces are cut, its tag kept at the first).

    Args:
        piece_counts: the pieces of each word, in order.
        budget: int. Pieces per window (`max_seq_length - 2`).

    Returns:
        list of `(start, end)` word ranges covering every word once, in order;
        `[(0, 0)]` for a sentence without words.

    Example:

    >>> fitting_windows([2, 3, 1, 4], 5)
    [(0, 2), (2, 3), (3, 4)]
    """
    windows, start, used = [], 0, 0
    for index, count in enumerate(piece_counts):
        if index > start and used + count > budget:
            windows.append((start, index))
            start, used = index, 0
        used += count
    windows.append((start, len(piece_counts)))
    return windows


_COUNTERS = weakref.WeakKeyDictionary()


def word_piece_counts(preprocessor: TextPreprocessor,
                      sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
    """How many pieces each word of each sentence is, tokenized as the dataset tokenizes it.

    Args:
        preprocessor: `TextPreprocessor`.
        sentences: list of word lists.

    Returns:
        list of int arrays, one per sentence.
    """
    count = _COUNTERS.get(preprocessor)
    if count is None:
        @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.string, 1, tf.int64)])
        def count(words):
            pieces, _, word = word_pieces(preprocessor, words)
            # Each piece's word, made flat over the batch's words.
            flat_word = word.flat_values + tf.gather(tf.cast(words.row_starts(), tf.int32),
                                                     tf.cast(pieces.value_rowids(), tf.int32))
            return tf.math.unsorted_segment_sum(tf.ones_like(flat_word), flat_word,
                                                tf.size(words.flat_values))

        _COUNTERS[preprocessor] = count
    counts = []
    for begin in range(0, len(sentences), 4096):
        block = [list(words) for words in sentences[begin:begin + 4096]]
        ragged = tf.RaggedTensor.from_row_lengths(
            tf.constant([w for words in block for w in words], tf.string),
            tf.constant([len(words) for words in block], tf.int64))
        flat = count(ragged).numpy()
        counts.extend(np.split(flat, np.cumsum([len(words) for words in block])[:-1]))
    return counts


_WINDOWERS = weakref.WeakKeyDictionary()


def tagging_windows(preprocessor: TextPreprocessor, sentences: Sequence[Sequence[str]],
                    window_stride: int) -> dict[str, list]:
    """The windows the served model reads sentences in, as rows to batch.

    Each sentence is split into `[CLS] pieces [SEP]` windows of at most
    `preprocessor.max_seq_length` tokens, `window_stride` pieces apart
    (`kbert.tasks.token_classification.serving.word_windows`); each word is
    tagged in the one window where its first piece has the most context.

    Args:
        preprocessor: `TextPreprocessor` at the window length.
        sentences: list of word lists.
        window_stride: int. Pieces between window starts.

    Returns:
        dict of lists, one entry per window: `token_ids` (list of int),
        `word_position` (per token: the index + 1 of the word it tags in its
        sentence, 0 elsewhere) and `sentence` (the sentence's index).

    Example:

    >>> tagging_windows(preprocessor, [["EU", "rejects"]], 64)["word_position"]
    [[0, 1, 2, 0]]
    """
    key = (preprocessor.max_seq_length, int(window_stride))
    functions = _WINDOWERS.setdefault(preprocessor, {})
    if key not in functions:
        @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.string, 1, tf.int64)])
        def windows_of(words):
            found = word_windows(preprocessor, words, window_stride)
            tagged_word = tf.where(found["tagged"].flat_values,
                                   tf.gather(found["word"], found["piece_index"].flat_values), -1)
            return (found["token_ids"], found["example"],
                    found["tagged"].with_flat_values(tagged_word))

        functions[key] = windows_of
    rows = {"token_ids": [], "word_position": [], "sentence": []}
    for begin in range(0, len(sentences), 1024):
        block = [list(words) for words in sentences[begin:begin + 1024]]
        lengths = [len(words) for words in block]
        ragged = tf.RaggedTensor.from_row_lengths(
            tf.constant([w for words in block for w in words], tf.string),
            tf.constant(lengths, tf.int64))
        token_ids, example, tagged_word = functions[key](ragged)
        # Flat word indices of the block, made positions within each sentence (+ 1).
        starts = np.cumsum([0] + lengths)
        for ids, sentence, words in zip(token_ids.to_list(), example.numpy().tolist(),
                                        tagged_word.to_list()):
            rows["token_ids"].append(ids)
            rows["word_position"].append(
                [0] + [w - starts[sentence] + 1 if w >= 0 else 0 for w in words] + [0])
            rows["sentence"].append(begin + sentence)
    return rows


def windows_dataset(windows: dict[str, list], batch_size: int,
                    max_seq_length: int) -> tf.data.Dataset:
    """Length-bucketed batches of `tagging_windows`' rows, each with its `example_index`.

    Args:
        windows: `tagging_windows`' dict.
        batch_size: int.
        max_seq_length: int. The window length.

    Returns:
        Dataset of dicts `token_ids`, `segment_ids`, `padding_mask`,
        `word_position` and `example_index` (the window's index).
    """
    token_ids = tf.ragged.constant(windows["token_ids"], dtype=tf.int32, ragged_rank=1)
    positions = tf.ragged.constant(windows["word_position"], dtype=tf.int32, ragged_rank=1)
    dataset = tf.data.Dataset.from_tensor_slices({
        "token_ids": token_ids, "word_position": positions,
        "example_index": tf.range(len(windows["token_ids"]), dtype=tf.int32)})
    dataset = dataset.map(lambda element: {
        **element, "segment_ids": tf.zeros_like(element["token_ids"]),
        "padding_mask": tf.ones_like(element["token_ids"])})
    return batch_by_length(dataset, batch_size, max_seq_length).prefetch(tf.data.AUTOTUNE)
