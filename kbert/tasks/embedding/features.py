"""Feature extraction: per-token vectors of chosen encoder layers (the BERT paper's feature-based use).

What google-research/bert's `extract_features.py` computes, as tensors:
`tools/extract_features.py` writes them as its JSON lines, and the exported
embedding model's `features` signature returns them with each piece's word.
"""

from __future__ import annotations

import re
from typing import Iterable, Iterator, Sequence

import tensorflow as tf

from kbert.data.text_preprocessor import TextPreprocessor
from kbert.data.text_preprocessor import column
from kbert.data.words import word_pieces

# google-research/bert's input layout for a pair: `text_a ||| text_b`.
PAIR_PATTERN = re.compile(r"^(.*) \|\|\| (.*)$")


def parse_line(line: str) -> tuple[str, str | None]:
    """`(text_a, text_b)` of one input line; `text_b` is None unless the line is `a ||| b`.

    Example:

    >>> parse_line("Who was Jim Henson ? ||| Jim Henson was a puppeteer")
    ('Who was Jim Henson ?', 'Jim Henson was a puppeteer')
    """
    line = line.strip()
    match = PAIR_PATTERN.match(line)
    return (match.group(1), match.group(2)) if match else (line, None)


def layer_features(encoder, inputs: dict, layers: Sequence[int]) -> tf.Tensor:
    """The chosen blocks' outputs, stacked: float32 `[batch, length, len(layers), hidden]`.

    Args:
        encoder: `BertEncoder` with `output_all_layers=True`.
        inputs: the three encoder inputs.
        layers: indexes into the blocks (0-based, from `kbert.layers.layer_indexes`).

    Returns:
        The stacked layer outputs, in `layers` order.
    """
    outputs = encoder(inputs, training=False)["encoder_outputs"]
    return tf.stack([tf.cast(outputs[index], tf.float32) for index in layers], axis=2)


def extract_features(encoder, preprocessor: TextPreprocessor, lines: Iterable[str],
                     layers: Sequence[int], batch_size: int = 32) -> Iterator[dict]:
    """Runs the encoder over input lines and yields each line's tokens and layer vectors.

    Lines are read lazily, `batch_size` at a time, so any file size streams.
    Texts are packed `[CLS] a [SEP] (b [SEP])` and cut to the preprocessor's
    `max_seq_length` as `extract_features.py` does (a pair loses pieces from
    its longer text first).

    Args:
        encoder: `BertEncoder` with `output_all_layers=True`.
        preprocessor: `TextPreprocessor`.
        lines: iterable of str, one example per line (`a ||| b` for pairs).
        layers: indexes into the blocks (0-based).
        batch_size: int. Lines per encoder call.

    Yields:
        Per line, in order: `{"token_ids": int array [length], "values":
        float32 array [length, len(layers), hidden]}`.

    Example:

    >>> for example in extract_features(encoder, preprocessor, ["a film"], [5, 4]):
    ...     example["values"].shape
    (4, 2, 384)
    """
    run = tf.function(lambda inputs: layer_features(encoder, inputs, layers), reduce_retracing=True)
    batch = []
    for line in lines:
        batch.append(parse_line(line))
        if len(batch) == batch_size:
            yield from _batch_features(run, preprocessor, batch)
            batch = []
    if batch:
        yield from _batch_features(run, preprocessor, batch)


def _batch_features(run, preprocessor: TextPreprocessor, batch) -> list[dict]:
    results = [None] * len(batch)
    # Singles and pairs pack differently; each group runs as one call.
    for is_pair in (False, True):
        rows = [i for i, (_, b) in enumerate(batch) if (b is not None) == is_pair]
        if not rows:
            continue
        segments = [preprocessor.tokenize(tf.constant([batch[i][0] for i in rows]))]
        if is_pair:
            segments.append(preprocessor.tokenize(tf.constant([batch[i][1] for i in rows])))
        inputs = preprocessor.pack(segments)
        values = run(inputs).numpy()
        lengths = inputs["padding_mask"].numpy().sum(axis=1)
        token_ids = inputs["token_ids"].numpy()
        for row, index in enumerate(rows):
            results[index] = {"token_ids": token_ids[row, :lengths[row]],
                              "values": values[row, :lengths[row]]}
    return results


def feature_json(line_index: int, example: dict, vocab: Sequence[str],
                 layer_numbers: Sequence[int]) -> dict:
    """One output line of google-research/bert's `extract_features.py`.

    Args:
        line_index: int. The input line (0-based): `linex_index`, their spelling.
        example: dict from `extract_features`.
        vocab: list of str, id -> token.
        layer_numbers: the layer numbers as the user gave them (e.g. -1, -2).

    Returns:
        `{"linex_index": i, "features": [{"token": t, "layers": [{"index": n,
        "values": [...]}, ...]}, ...]}`, values rounded to 6 decimals as theirs.
    """
    features = []
    for token_id, vectors in zip(example["token_ids"], example["values"]):
        features.append({"token": vocab[token_id], "layers": [
            {"index": int(number), "values": [round(float(x), 6) for x in vector]}
            for number, vector in zip(layer_numbers, vectors)]})
    return {"linex_index": int(line_index), "features": features}


def word_aligned_inputs(preprocessor: TextPreprocessor, words: tf.RaggedTensor) -> tuple[dict, tf.Tensor]:
    """`[CLS] pieces [SEP]` of whitespace words, and each position's word.

    Args:
        preprocessor: `TextPreprocessor`.
        words: ragged string `[batch, (words)]` (`kbert.data.words.split_words`).

    Returns:
        `(inputs, word_ids)`: the three encoder inputs, and int32
        `[batch, length]` with the index of each piece's word, -1 on
        `[CLS]`, `[SEP]` and padding. Pieces past `max_seq_length - 2` are cut.
    """
    pieces, _, word = word_pieces(preprocessor, words)
    budget = preprocessor.max_seq_length - 2
    pieces = pieces[:, :budget].with_row_splits_dtype(tf.int64)
    word = word[:, :budget].with_row_splits_dtype(tf.int64)
    count = pieces.nrows()
    token_ids = tf.concat([column(count, preprocessor.cls_id), pieces,
                           column(count, preprocessor.sep_id)], axis=1)
    word_ids = tf.concat([column(count, -1), word, column(count, -1)], axis=1)
    inputs = preprocessor.to_dense(token_ids, tf.zeros_like(token_ids))
    return inputs, word_ids.to_tensor(default_value=-1)

