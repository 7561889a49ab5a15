"""ModernBERT's attention in memory linear in length: sliding-window blocks and query chunks.

Three ways to compute the same softmax attention over rotated queries and
keys `[batch, heads, length, head_dim]` (heads first, so every product is a
batched matmul), with the visibility rule of Hugging
Face's ModernBERT: query `i` sees key `j` iff `j` is a real token of the
same instance as `i` (`attention_ids`: the padding mask of a padded batch,
or the `instance_ids` of packed rows; 0 is padding) and, in a local layer,
`|i - j| <= window_radius` (HF's `local_attention // 2` on each side).

- `plain_attention`: the formula itself, `[batch, heads, length, length]`
  scores; the reference, the path that returns attention probabilities,
  and the fastest for short inputs.
- `local_block_attention`: queries in blocks of `window_radius`, each
  against the three key blocks around it; memory and time grow linearly
  with length for a fixed window.
- `chunked_global_attention`: queries in chunks, each against every key;
  no tensor beyond `[batch, heads, chunk, length]` exists at once.

Hand-written because Keras's `MultiHeadAttention` and keras-hub's
`CachedMultiHeadAttention` build the full score matrix, and
`keras.ops.dot_product_attention` takes no sliding window on the TF backend.
TensorFlow ops (not `keras.ops`) because the lengths are dynamic.

Outputs at padding positions are undefined (as in HF); a masked score is a
large finite negative number, so a query that sees no key still gets a
finite output and no NaN reaches the real tokens through a later layer.
"""

from __future__ import annotations

import tensorflow as tf

# Score of a key the query must not see: finite, so no row is all -inf (NaN).
MASKED_SCORE = -1e9


def _visible(query_ids, key_ids):
    """Bool `[..., queries, keys]`: same instance and the key is a real token."""
    query_ids = tf.expand_dims(query_ids, -1)
    key_ids = tf.expand_dims(key_ids, -2)
    return tf.logical_and(tf.equal(query_ids, key_ids), tf.not_equal(key_ids, 0))


def _softmax(scores, visible, dtype):
    """Softmax in float32 over the visible keys (HF upcasts too), back in `dtype`."""
    scores = tf.where(visible, tf.cast(scores, tf.float32), MASKED_SCORE)
    return tf.cast(tf.nn.softmax(scores, axis=-1), dtype)


def _scale(query):
    return tf.cast(query.shape[-1] ** -0.5, query.dtype)


def plain_attention(query, key, value, attention_ids, window_radius: int | None = None):
    """Attention with the full `[batch, heads, length, length]` score matrix.

    Args:
        query: `[batch, heads, length, head_dim]`, RoPE applied.
        key: same shape as `query`, RoPE applied.
        value: same shape as `query`.
        attention_ids: int `[batch, length]`: the instance of each token, 0
            for padding (a padded batch passes its padding mask).
        window_radius: int or None. Keys within this distance only (a local
            layer); None sees the whole instance (a global layer).

    Returns:
        `(outputs, probabilities)`: `[batch, heads, length, head_dim]` and
        `[batch, heads, length, length]`.

    Example:

    >>> outputs, probabilities = plain_attention(q, k, v, padding_mask, window_radius=64)
    """
    scores = tf.matmul(query, key, transpose_b=True) * _scale(query)
    visible = _visible(attention_ids, attention_ids)
    if window_radius is not None:
        positions = tf.range(tf.shape(query)[2])
        distance = tf.abs(positions[:, None] - positions[None, :])
        visible = tf.logical_and(visible, distance <= window_radius)
    probabilities = _softmax(scores, visible[:, None], query.dtype)
    return tf.matmul(probabilities, value), probabilities


def local_block_attention(query, key, value, attention_ids, window_radius: int):
    """Sliding-window attention computed in blocks: no `[length, length]` tensor.

    The queries are cut into blocks of `window_radius` positions (the last
    one padded); every key a block's queries may see lies in that block or
    the one on either side, so each block is scored against those three
    (`3 * window_radius` keys) and a fixed band mask keeps `|i - j| <=
    window_radius`. Scores take `batch * heads * length * 3 * window_radius`
    numbers.

    Args:
        query: `[batch, heads, length, head_dim]`, RoPE applied.
        key: same shape as `query`, RoPE applied.
        value: same shape as `query`.
        attention_ids: int `[batch, length]`: instance of each token, 0 padding.
        window_radius: int >= 0. How far each side a query sees (HF's
            `local_attention // 2`).

    Returns:
        `[batch, heads, length, head_dim]`, equal to `plain_attention`'s outputs.

    Example:

    >>> outputs = local_block_attention(q, k, v, padding_mask, window_radius=64)
    """
    block = max(int(window_radius), 1)
    batch, length = tf.shape(query)[0], tf.shape(query)[2]
    heads, head_dim = query.shape[1], query.shape[3]
    num_blocks = (length + block - 1) // block
    extra = num_blocks * block - length
    scale = _scale(query)
    # Queries padded to whole blocks; keys also by one block on each side,
    # with id 0 so the padding is never seen.
    query = tf.reshape(tf.pad(query, [[0, 0], [0, 0], [0, extra], [0, 0]]),
                       [batch, heads, num_blocks, block, head_dim])
    query_ids = tf.reshape(tf.pad(attention_ids, [[0, 0], [0, extra]]),
                           [batch, num_blocks, block])

    def windows(tensor, time_axis):
        """Pads the time axis by a block each side (and to whole blocks), then gives each
        block its three: `[..., num_blocks, 3 * block, ...]` in place of the time axis."""
        padding = [[0, 0]] * len(tensor.shape)
        padding[time_axis] = [block, extra + block]
        tensor = tf.pad(tensor, padding)
        shape = tf.shape(tensor)
        tensor = tf.reshape(tensor, tf.concat([shape[:time_axis], [num_blocks + 2, block],
                                               shape[time_axis + 1:]], axis=0))
        three = [tf.gather(tensor, tf.range(first, first + num_blocks), axis=time_axis)
                 for first in range(3)]
        return tf.concat(three, axis=time_axis + 1)

    key_windows, value_windows = windows(key, 2), windows(value, 2)
    key_ids = windows(attention_ids, 1)  # [batch, num_blocks, 3 * block]
    scores = tf.matmul(query, key_windows, transpose_b=True) * scale
    # Query q of a block and key k of its window are k - block - q apart,
    # whichever the block: one [block, 3 * block] band for all.
    offsets = tf.range(3 * block)[None, :] - block - tf.range(block)[:, None]
    visible = tf.logical_and(_visible(query_ids, key_ids), tf.abs(offsets) <= window_radius)
    probabilities = _softmax(scores, visible[:, None], query.dtype)
    outputs = tf.reshape(tf.matmul(probabilities, value_windows),
                         [batch, heads, num_blocks * block, head_dim])
    return outputs[:, :, :length]


def chunked_global_attention(query, key, value, attention_ids, chunk_size: int):
    """Global attention a chunk of queries at a time: softmax over all keys per chunk.

    A sequence no longer than `chunk_size` (known when the graph is built)
    is one plain computation; a longer or unknown one runs the chunks in a
    `tf.map_fn` loop one after the other, so at most `[batch, heads,
    chunk_size, length]` scores exist at once, in training too (each chunk is
    recomputed in the backward pass rather than kept).

    Args:
        query: `[batch, heads, length, head_dim]`, RoPE applied.
        key: same shape as `query`, RoPE applied.
        value: same shape as `query`.
        attention_ids: int `[batch, length]`: instance of each token, 0 padding.
        chunk_size: int. Queries per chunk.

    Returns:
        `[batch, heads, length, head_dim]`, equal to `plain_attention`'s outputs.

    Example:

    >>> outputs = chunked_global_attention(q, k, v, padding_mask, chunk_size=512)
    """
    if query.shape[2] is not None and query.shape[2] <= chunk_size:
        return plain_attention(query, key, value, attention_ids)[0]
    batch, length = tf.shape(query)[0], tf.shape(query)[2]
    heads, head_dim = query.shape[1], query.shape[3]
    chunk = tf.minimum(chunk_size, length)
    num_chunks = (length + chunk - 1) // chunk
    extra = num_chunks * chunk - length
    query = tf.pad(query, [[0, 0], [0, 0], [0, extra], [0, 0]])
    query_ids = tf.pad(attention_ids, [[0, 0], [0, extra]])
    # Chunks first, for map_fn.
    query = tf.transpose(tf.reshape(query, [batch, heads, num_chunks, chunk, head_dim]),
                         [2, 0, 1, 3, 4])
    query_ids = tf.transpose(tf.reshape(query_ids, [batch, num_chunks, chunk]), [1, 0, 2])
    scale = _scale(query)

    # Recomputed in the backward pass instead of kept: training then holds no
    # chunk's [batch, heads, chunk, length] probabilities beyond the one in use.
    # Every tensor it reads is an argument: recompute_grad takes no gradient to,
    # and no captured tensor from, the enclosing graph.
    @tf.recompute_grad
    def attend(chunk_query, chunk_ids, key, value, key_ids):
        scores = tf.matmul(chunk_query, key, transpose_b=True) * scale
        probabilities = _softmax(scores, _visible(chunk_ids, key_ids)[:, None], query.dtype)
        return tf.matmul(probabilities, value)

    # The ids as floats (small integers, compared exactly): recompute_grad
    # watches its arguments and warns about integer ones.
    key_ids = tf.cast(attention_ids, tf.float32)

    def one_chunk(chunk_inputs):
        chunk_query, chunk_ids = chunk_inputs
        return attend(chunk_query, tf.cast(chunk_ids, tf.float32), key, value, key_ids)

    # One chunk at a time (parallel_iterations=1) is what bounds the memory.
    outputs = tf.map_fn(one_chunk, (query, query_ids), parallel_iterations=1,
                        fn_output_signature=tf.TensorSpec([None, heads, None, head_dim],
                                                          query.dtype))
    outputs = tf.reshape(tf.transpose(outputs, [1, 2, 0, 3, 4]),
                         [batch, heads, num_chunks * chunk, head_dim])
    return outputs[:, :, :length]
