"""The export's `tokenize` function: the model's own tokenizer, for kbert-serve's `POST /tokenize`.

text-embeddings-inference's `/tokenize` answers each text's tokens (id, text,
whether special, byte offsets). The tokenizer lives in the SavedModel's graph
(`TextPreprocessor`), and `kbert.serving` imports nothing of kbert, so the
export saves it as a function of the SavedModel's root object: `tokenize`, not a
signature, since TF Serving's clients have no use for it (stock TF Serving
loads the export as before and ignores it; kbert-serve calls
`loaded.tokenize(text=...)`). It uses the same ops as the signatures, so the
ops check holds.

Like TEI's, it does not truncate: it shows the whole text's pieces, with the
model's special tokens around them (`[CLS]` ... `[SEP]`, or what a
`tokenizer.json`'s post-processor places).
"""

from __future__ import annotations

import tensorflow as tf

# The name kbert-serve looks the function up by (kbert.serving.servable.TOKENIZE_FUNCTION).
TOKENIZE_FUNCTION = "tokenize"


def tokenizer_function(preprocessor) -> tf.function:
    """`tokenize(text)`: each text's pieces, with the special tokens a single text is packed with.

    Args:
        preprocessor: the serving module's `TextPreprocessor` (its tokenizer's
            `vocabulary` gives the special tokens' text).

    Returns:
        `tf.function` on string `[batch]` `text` returning a dict of, per text
        and token, padded to the batch's longest: `token_ids` int32 (-1 past
        the end), `starts` and `ends` int32 byte offsets into the text (-1
        for special tokens), `texts` string (the text's bytes of the piece,
        or the special token), `special` bool; and `num_tokens` int32 `[batch]`.

    Example:

    >>> tokenize = tokenizer_function(module.preprocessor)
    >>> tokenize(text=tf.constant(["Hi there"]))["texts"]
    <tf.Tensor: shape=(1, 4), dtype=string, numpy=array([[b'[CLS]', b'Hi', b'there', b'[SEP]']], dtype=object)>
    """
    tokens = preprocessor.tokenizer.vocabulary
    template = preprocessor.templates[0]  # one segment
    segment = next(i for i, (is_segment, _, _) in enumerate(template) if is_segment)
    before = [value for _, value, _ in template[:segment]]
    after = [value for _, value, _ in template[segment + 1:]]

    def tokenize(text):
        cleaned = preprocessor.clean(text)
        pieces, starts, ends, _ = preprocessor.tokenize_with_offsets(cleaned)
        starts, ends = tf.cast(starts, tf.int32), tf.cast(ends, tf.int32)
        piece_texts = tf.RaggedTensor.from_row_splits(
            tf.strings.substr(tf.gather(cleaned, starts.value_rowids()), starts.flat_values,
                              ends.flat_values - starts.flat_values),
            starts.row_splits, validate=False)
        lengths = pieces.row_lengths()

        def around(middle, special_value):
            # Each row's pieces between the special tokens, placed by flat index
            # arithmetic (TensorFlow's ragged concat of columns costs ~0.3 s of
            # tracing a call, in every export).
            values = [special_value(token) for token in before + after]
            return _between(middle, values[:len(before)], values[len(before):], lengths)

        token_ids = around(tf.cast(pieces, tf.int32), lambda token: tf.constant(token, tf.int32))
        return {
            "token_ids": token_ids.to_tensor(default_value=-1),
            "starts": around(starts, lambda token: tf.constant(-1, tf.int32)).to_tensor(default_value=-1),
            "ends": around(ends, lambda token: tf.constant(-1, tf.int32)).to_tensor(default_value=-1),
            "texts": around(piece_texts, lambda token: tf.constant(tokens[token])).to_tensor(default_value=""),
            "special": around(tf.zeros_like(pieces, tf.bool),
                              lambda token: tf.constant(True)).to_tensor(default_value=False),
            "num_tokens": tf.cast(token_ids.row_lengths(), tf.int32),
        }

    return tf.function(tokenize, autograph=False,
                       input_signature=[tf.TensorSpec([None], tf.string, name="text")])


def _between(middle: tf.RaggedTensor, before: list, after: list, lengths: tf.Tensor) -> tf.RaggedTensor:
    """Each row of `middle` (`lengths` long) with the scalars `before` ahead and `after` behind."""
    count = len(before) + len(after)
    splits = tf.concat([[0], tf.cumsum(lengths + count)], 0)
    row_start = splits[:-1]
    rows = tf.size(lengths, out_type=splits.dtype)
    row = middle.value_rowids()
    middle_at = (tf.range(tf.size(middle.flat_values, out_type=splits.dtype))
                 - tf.gather(middle.row_splits, row) + tf.gather(row_start, row) + len(before))
    indices, parts = [middle_at], [middle.flat_values]
    for offsets, values in ((row_start, before), (row_start + len(before) + lengths, after)):
        for k, value in enumerate(values):
            indices.append(offsets + k)
            parts.append(tf.fill([rows], tf.cast(value, middle.dtype)))
    flat = tf.dynamic_stitch([tf.cast(i, tf.int32) for i in indices], parts)
    return tf.RaggedTensor.from_row_splits(flat, splits, validate=False)
