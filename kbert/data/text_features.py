"""Fine-tuning inputs from raw text, in tf.data: WordPiece, packing, dynamic padding.

Tokenization runs inside tf.data with `kbert.data.BertWordpieceTokenizer` over
the pre-trained model's `vocab.txt`: the original BERT normalization (lower
casing and accent stripping when `do_lower_case`), basic tokenization and
WordPiece, the same ids as pre-training and the exported serving signatures. Sentence pairs are packed
as `[CLS] a [SEP] b [SEP]`, the longer segment trimmed first as
`run_classifier.py`'s `_truncate_seq_pair` does (`RoundRobinTrimmer` gives the
same lengths). Batches are bucketed by length and padded to the longest
sequence in the batch, so no time is spent on padding up to `max_seq_length`.

Every dataset here yields flat dicts: `token_ids`, `segment_ids`,
`padding_mask` (int32, [batch, length]) plus task fields (`label`, `weight`,
`example_index`, ...); the fine-tuning loop picks what it needs.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_text as tft

from kbert.data.bert_wordpiece_tokenizer import BertWordpieceTokenizer
from kbert.data.vocabulary import INPUT_TOKENS
from kbert.data.vocabulary import read_vocab

PAD, UNK, CLS, SEP = "[PAD]", "[UNK]", "[CLS]", "[SEP]"


class TextFeaturizer:
    """Turns raw text into BERT inputs with tensorflow-text, for fine-tuning datasets.

    Wraps a `kbert.data.BertWordpieceTokenizer` and knows the special token ids,
    so datasets can tokenize and pack inside `tf.data`.

    Args:
        vocab_file: str. WordPiece vocabulary, one token per line.
        do_lower_case: bool. Lower case and strip accents before WordPiece
            (uncased models). Defaults to True.

    Example:

    >>> featurizer = kbert.data.TextFeaturizer("vocab.txt", do_lower_case=True)
    >>> featurizer.tokenize(["Hello world"])
    <tf.RaggedTensor [[7592, 2088]]>
    """

    def __init__(self, vocab_file: str, do_lower_case: bool = True):
        self.vocab_file = vocab_file
        self.do_lower_case = do_lower_case
        self.vocabulary = read_vocab(vocab_file, INPUT_TOKENS)
        self.vocabulary_size = len(self.vocabulary)
        ids = {token: i for i, token in enumerate(self.vocabulary)}
        self.pad_id, self.cls_id, self.sep_id = ids[PAD], ids[CLS], ids[SEP]
        self.tokenizer = BertWordpieceTokenizer(self.vocabulary, do_lower_case)

    def tokenize(self, texts) -> tf.RaggedTensor:
        """WordPiece ids of each text: `[batch] -> [batch, (pieces)]` (int32)."""
        return self.tokenizer.tokenize(texts)

    def tokenize_with_offsets(self, texts):
        """Ids and byte offsets `[start, end)` of each wordpiece in its text."""
        return self.tokenizer.tokenize_with_offsets(texts)

    def pack(self, segments: list[tf.RaggedTensor], max_seq_length: int):
        """Trims and packs one or two tokenized segments as `[CLS] a [SEP] (b [SEP])`.

        Args:
            segments: list of 1 or 2 `[batch, (pieces)]` ragged tensors.
            max_seq_length: int. Total length including special tokens.

        Returns:
            `(token_ids, segment_ids)` ragged `[batch, (length)]` int32.
        """
        budget = max_seq_length - 1 - len(segments)
        trimmed = tft.RoundRobinTrimmer(budget).trim(segments)
        token_ids, segment_ids = tft.combine_segments(trimmed, self.cls_id, self.sep_id)
        return tf.cast(token_ids, tf.int32), tf.cast(segment_ids, tf.int32)


def check_max_seq_length(max_seq_length: int, max_positions: int | None = None) -> None:
    """Raises a clear error for a `max_seq_length` the encoder cannot take.

    Args:
        max_seq_length: int. Requested packed length.
        max_positions: int or None. The encoder's position embeddings.
    """
    if max_seq_length < 3:
        raise ValueError(f"max_seq_length={max_seq_length} is too small; it must be >= 3.")
    if max_positions is not None and max_seq_length > max_positions:
        raise ValueError(
            f"max_seq_length={max_seq_length} is larger than the encoder's {max_positions} "
            f"positions (max_position_embeddings); pass max_seq_length<={max_positions}."
        )


def bucket_boundaries(max_seq_length: int) -> list[int]:
    """Bucket upper bounds (exclusive) for `bucket_by_sequence_length`: 16, 32, 64, ... max+1."""
    boundaries = []
    bound = 16
    while bound < max_seq_length:
        boundaries.append(bound + 1)
        bound *= 2
    return boundaries + [max_seq_length + 1]


def batch_by_length(dataset: tf.data.Dataset, batch_size: int, max_seq_length: int,
                    bucket: bool = True) -> tf.data.Dataset:
    """Batches dict elements, padding each batch to its longest `token_ids`.

    Args:
        dataset: elements are dicts of 1-D (per position) and scalar tensors.
        batch_size: int.
        max_seq_length: int. Longest possible sequence.
        bucket: bool. Group elements of similar length first (training and
            evaluation order changes; each element carries its index). False
            keeps order.

    Returns:
        The batched dataset.
    """
    # `unbatch` and ragged slicing leave 1-D RaggedTensors, which padded
    # batching refuses; they are plain vectors, so make them dense.
    dataset = dataset.map(lambda element: {
        key: value.to_tensor() if isinstance(value, tf.RaggedTensor) else value
        for key, value in element.items()})
    if not bucket:
        return dataset.padded_batch(batch_size)
    boundaries = bucket_boundaries(max_seq_length)
    return dataset.bucket_by_sequence_length(
        element_length_func=lambda element: tf.shape(element["token_ids"])[0],
        bucket_boundaries=boundaries,
        bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
    )


def classification_dataset(
    featurizer: TextFeaturizer,
    texts_a: Sequence[str],
    texts_b: Sequence[str] | None,
    labels: Sequence[float] | None,
    batch_size: int,
    max_seq_length: int,
    is_training: bool = False,
    regression: bool = False,
    seed: int | None = None,
) -> tf.data.Dataset:
    """Sentence (pair) classification or regression batches.

    Args:
        featurizer: `TextFeaturizer`.
        texts_a: first sentences.
        texts_b: second sentences, or None for single-sentence tasks.
        labels: class ids (or scores when `regression`), or None.
        batch_size: int.
        max_seq_length: int.
        is_training: bool. Shuffle (with `seed`) and repeat forever.
        regression: bool. Labels are float32 scores instead of int32 ids.
        seed: int or None. Shuffle seed.

    Returns:
        Dataset of dicts `token_ids`, `segment_ids`, `padding_mask`, `label`,
        `example_index`.
    """
    count = len(texts_a)
    columns = {
        "text_a": np.asarray(texts_a, dtype=object),
        "example_index": np.arange(count, dtype=np.int32),
        "label": np.asarray(labels if labels is not None else [0] * count,
                            dtype=np.float32 if regression else np.int32),
    }
    if texts_b is not None:
        columns["text_b"] = np.asarray(texts_b, dtype=object)
    dataset = tf.data.Dataset.from_tensor_slices(columns)
    if is_training:
        dataset = dataset.shuffle(count, seed=seed, reshuffle_each_iteration=True).repeat()

    def encode(batch):
        segments = [featurizer.tokenize(batch["text_a"])]
        if "text_b" in batch:
            segments.append(featurizer.tokenize(batch["text_b"]))
        token_ids, segment_ids = featurizer.pack(segments, max_seq_length)
        return {
            "token_ids": token_ids,
            "segment_ids": segment_ids,
            "padding_mask": tf.ones_like(token_ids),
            "label": batch["label"],
            "example_index": batch["example_index"],
        }

    # Tokenize in groups (one op call per 256 texts), then unbatch to bucket.
    dataset = dataset.batch(256).map(encode, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    return batch_by_length(dataset, batch_size, max_seq_length).prefetch(tf.data.AUTOTUNE)


def token_classification_dataset(
    featurizer: TextFeaturizer,
    sentences: Sequence[Sequence[str]],
    tag_ids: Sequence[Sequence[int]] | None,
    batch_size: int,
    max_seq_length: int,
    is_training: bool = False,
    seed: int | None = None,
) -> tf.data.Dataset:
    """Token classification (NER) batches: one label per word, at its first wordpiece.

    Each word is tokenized on its own; its first wordpiece carries the word's
    tag with weight 1, other wordpieces and `[CLS]`/`[SEP]` weight 0. Words past
    `max_seq_length - 2` wordpieces are cut (they get no position).

    Args:
        featurizer: `TextFeaturizer`.
        sentences: list of word lists.
        tag_ids: list of tag-id lists (same shapes), or None.
        batch_size: int.
        max_seq_length: int.
        is_training: bool. Shuffle (with `seed`) and repeat forever.
        seed: int or None.

    Returns:
        Dataset of dicts `token_ids`, `segment_ids`, `padding_mask`, `label`
        and `weight` (per position), `word_position` (word index + 1 at
        first wordpieces, 0 elsewhere) and `example_index`.
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
    budget = max_seq_length - 2

    def encode(element):
        pieces = featurizer.tokenize(element["words"])  # [words, (pieces)]
        lengths = tf.cast(pieces.row_lengths(), tf.int32)
        first = tf.equal(tf.ragged.range(lengths).flat_values, 0)
        word_tags = tf.repeat(element["tags"], lengths)
        word_numbers = tf.repeat(tf.range(1, tf.size(lengths) + 1, dtype=tf.int32), lengths)
        token_ids = pieces.flat_values[:budget]
        first = first[:budget]
        zero = tf.zeros([1], tf.int32)
        token_ids = tf.concat([[featurizer.cls_id], token_ids, [featurizer.sep_id]], 0)
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
    return batch_by_length(dataset, batch_size, max_seq_length).prefetch(tf.data.AUTOTUNE)
