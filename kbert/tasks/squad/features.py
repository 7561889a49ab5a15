"""SQuAD examples -> windowed span-labeling features, and their tf.data batches.

As `run_squad.py`: the question is cut to `max_query_length` wordpieces; a
context longer than the room left is covered by windows `doc_stride` tokens
apart; each context token remembers whether this window gives it the most
context on both sides (only there may an answer start). The answer's character
span becomes a token span through the tokenizer's offsets (tensorflow-text
gives each wordpiece's `[start, end)` in the original text), so no
whitespace re-tokenization heuristics are needed and predictions map back to
the exact characters of the context.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from kbert.data.bucketing import batch_by_length
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.tasks.squad.reader import SquadExample


@dataclasses.dataclass
class SquadFeature:
    """One window of one example.

    Args:
        example_index: int. Index of its `SquadExample`.
        token_ids: list of int. `[CLS] question [SEP] context window [SEP]`.
        segment_ids: list of int. 0 for the question part, 1 for the context.
        token_to_char: dict. Position -> `(start, end)` characters in the
            context, for context positions only.
        token_is_max_context: dict. Position -> bool.
        start_position: int. Training label (0 = `[CLS]` = no answer here).
        end_position: int.
    """

    example_index: int
    token_ids: list[int]
    segment_ids: list[int]
    token_to_char: dict[int, tuple[int, int]]
    token_is_max_context: dict[int, bool]
    start_position: int = 0
    end_position: int = 0


def _char_offsets(text: str, byte_starts, byte_ends) -> list[tuple[int, int]]:
    # tensorflow-text returns UTF-8 byte offsets; SQuAD counts characters.
    char_of_byte = np.zeros(len(text.encode("utf-8")) + 1, dtype=np.int64)
    position = 0
    for index, ch in enumerate(text):
        width = len(ch.encode("utf-8"))
        char_of_byte[position:position + width] = index
        position += width
    char_of_byte[position] = len(text)
    return [(int(char_of_byte[s]), int(char_of_byte[e])) for s, e in zip(byte_starts, byte_ends)]


def _max_context(spans: list[tuple[int, int]], span_index: int, position: int) -> bool:
    # run_squad.py's _check_is_max_context: the window where the token has the
    # most context on its shorter side (plus a small bonus for longer windows).
    best_score, best_index = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, index
    return best_index == span_index


def squad_features(
    preprocessor: TextPreprocessor,
    examples: list[SquadExample],
    doc_stride: int = 128,
    max_query_length: int = 64,
    is_training: bool = False,
) -> list[SquadFeature]:
    """Tokenizes examples and cuts them into windows.

    Args:
        preprocessor: `TextPreprocessor`; its `max_seq_length` is the packed
            length (`run_squad.py` uses 384).
        examples: list of `SquadExample`.
        doc_stride: int. Tokens between window starts. Defaults to 128.
        max_query_length: int. Question wordpieces kept. Defaults to 64.
        is_training: bool. Compute `start_position`/`end_position`.

    Returns:
        list of `SquadFeature`, in example order.

    Example:

    >>> features = squad_features(preprocessor, examples, doc_stride=128)
    """
    max_seq_length = preprocessor.max_seq_length
    if max_seq_length < max_query_length + 4:
        raise ValueError(
            f"max_seq_length={max_seq_length} leaves no room for the context after "
            f"max_query_length={max_query_length}; raise max_seq_length or lower max_query_length."
        )
    contexts = list(dict.fromkeys(example.context for example in examples))
    context_tokens = {}
    # Tokenize in groups of 256 texts to keep op calls few and memory small.
    for begin in range(0, len(contexts), 256):
        group = contexts[begin:begin + 256]
        ids, starts, ends, _ = preprocessor.tokenize_with_offsets(tf.constant(group))
        for text, i, s, e in zip(group, ids.to_list(), starts.to_list(), ends.to_list()):
            context_tokens[text] = (i, _char_offsets(text, s, e))
    questions = preprocessor.tokenize(tf.constant([e.question for e in examples])).to_list()

    features = []
    for example_index, example in enumerate(examples):
        query = questions[example_index][:max_query_length]
        doc_ids, doc_chars = context_tokens[example.context]
        answer_tokens = None
        if is_training and not example.is_impossible and example.answer_start is not None:
            inside = [i for i, (s, e) in enumerate(doc_chars)
                      if e > example.answer_start and s < example.answer_end]
            if not inside:
                continue  # The answer covers no wordpiece (e.g. only whitespace).
            answer_tokens = (inside[0], inside[-1])
        room = max_seq_length - len(query) - 3
        spans, start = [], 0
        while True:
            length = min(len(doc_ids) - start, room)
            spans.append((start, length))
            if start + length >= len(doc_ids):
                break
            start += min(length, doc_stride)
        offset = len(query) + 2
        for span_index, (start, length) in enumerate(spans):
            feature = SquadFeature(
                example_index=example_index,
                token_ids=([preprocessor.cls_id] + query + [preprocessor.sep_id]
                           + doc_ids[start:start + length] + [preprocessor.sep_id]),
                segment_ids=[0] * offset + [1] * (length + 1),
                token_to_char={offset + i: doc_chars[start + i] for i in range(length)},
                token_is_max_context={offset + i: _max_context(spans, span_index, start + i)
                                      for i in range(length)},
            )
            if answer_tokens is not None and start <= answer_tokens[0] and \
                    answer_tokens[1] < start + length:
                feature.start_position = answer_tokens[0] - start + offset
                feature.end_position = answer_tokens[1] - start + offset
            features.append(feature)
    return features


def span_dataset(
    features: list[SquadFeature],
    batch_size: int,
    max_seq_length: int,
    is_training: bool = False,
    seed: int | None = None,
) -> tf.data.Dataset:
    """Batches of span-labeling features, bucketed by length.

    Args:
        features: list of `SquadFeature`.
        batch_size: int.
        max_seq_length: int.
        is_training: bool. Shuffle (with `seed`) and repeat forever.
        seed: int or None.

    Returns:
        Dataset of dicts `token_ids`, `segment_ids`, `padding_mask`,
        `start_position`, `end_position`, `feature_index`.
    """
    token_ids = tf.ragged.constant([f.token_ids for f in features], dtype=tf.int32)
    segment_ids = tf.ragged.constant([f.segment_ids for f in features], dtype=tf.int32)
    dataset = tf.data.Dataset.from_tensor_slices({
        "token_ids": token_ids,
        "segment_ids": segment_ids,
        "start_position": tf.constant([f.start_position for f in features], tf.int32),
        "end_position": tf.constant([f.end_position for f in features], tf.int32),
        "feature_index": tf.range(len(features), dtype=tf.int32),
    })
    if is_training:
        dataset = dataset.shuffle(len(features), seed=seed, reshuffle_each_iteration=True).repeat()
    dataset = dataset.map(lambda e: {**e, "padding_mask": tf.ones_like(e["token_ids"])})
    return batch_by_length(dataset, batch_size, max_seq_length).prefetch(tf.data.AUTOTUNE)
