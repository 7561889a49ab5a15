"""ModernBERT's attention: block-local and chunked-global equal the plain formula; RoPE's closed form."""

import numpy as np
import pytest
import tensorflow as tf
from keras_hub.layers import RotaryEmbedding

from kbert.models.modernbert.modernbert_attention import chunked_global_attention
from kbert.models.modernbert.modernbert_attention import local_block_attention
from kbert.models.modernbert.modernbert_attention import plain_attention

BATCH, HEADS, HEAD_DIM = 2, 3, 4


def _qkv(length, seed=0):
    rng = np.random.default_rng(seed)
    return [tf.constant(rng.normal(0, 1.5, (BATCH, HEADS, length, HEAD_DIM)), tf.float32)
            for _ in range(3)]


def _ids(length):
    """Row 0 padded after 2/3 of its length; row 1 three packed instances then padding."""
    ids = np.zeros((BATCH, length), "int32")
    ids[0, :max(1, 2 * length // 3)] = 1
    cuts = sorted({0, length // 4, length // 2, length - 1, length})
    for number, (start, end) in enumerate(zip(cuts, cuts[1:-1] + [cuts[-2]]), start=1):
        ids[1, start:end] = number
    return tf.constant(ids)


def _naive(q, k, v, ids, radius):
    """The formula with loops over queries, in float64: what all three must equal.

    Takes heads-first tensors and returns `[batch, length, heads, head_dim]`.
    """
    q, k, v = (np.asarray(t, np.float64).transpose(0, 2, 1, 3) for t in (q, k, v))
    ids = np.asarray(ids)
    out = np.zeros_like(q)
    for b in range(q.shape[0]):
        for i in range(q.shape[1]):
            visible = (ids[b] == ids[b, i]) & (ids[b] != 0)
            if radius is not None:
                visible &= np.abs(np.arange(q.shape[1]) - i) <= radius
            if not visible.any():
                continue  # padding query: undefined
            scores = np.einsum("nd,knd->nk", q[b, i], k[b, visible]) / np.sqrt(q.shape[-1])
            p = np.exp(scores - scores.max(-1, keepdims=True))
            out[b, i] = np.einsum("nk,knd->nd", p / p.sum(-1, keepdims=True), v[b, visible])
    return out


def _real(ids):
    return np.asarray(ids) != 0


def _time_major(outputs):
    """`[batch, heads, length, head_dim]` -> `[batch, length, heads, head_dim]` numpy."""
    return np.asarray(outputs).transpose(0, 2, 1, 3)


@pytest.mark.parametrize("length,radius", [(1, 2), (7, 0), (13, 1), (13, 2), (16, 4), (11, 64)])
def test_local_blocks_equal_the_plain_formula(length, radius):
    q, k, v = _qkv(length)
    ids = _ids(length)
    expected = _naive(q, k, v, ids, radius)
    plain = _time_major(plain_attention(q, k, v, ids, radius)[0])
    blocks = _time_major(local_block_attention(q, k, v, ids, radius))
    real = _real(ids)
    np.testing.assert_allclose(plain[real], expected[real], atol=1e-5)
    np.testing.assert_allclose(blocks[real], expected[real], atol=1e-5)
    assert np.isfinite(blocks).all()


@pytest.mark.parametrize("length,chunk", [(13, 4), (13, 1), (12, 12), (5, 16)])
def test_global_chunks_equal_the_plain_formula(length, chunk):
    q, k, v = _qkv(length, seed=1)
    ids = _ids(length)
    expected = _naive(q, k, v, ids, None)
    real = _real(ids)
    np.testing.assert_allclose(_time_major(plain_attention(q, k, v, ids)[0])[real],
                               expected[real], atol=1e-5)
    np.testing.assert_allclose(_time_major(chunked_global_attention(q, k, v, ids, chunk))[real],
                               expected[real], atol=1e-5)


def test_unknown_lengths_and_gradients_equal_the_plain_formula():
    """In a graph of unknown length (the functional model's), values and gradients agree."""
    length = 13
    q, k, v = _qkv(length, seed=2)
    ids = _ids(length)
    spec = tf.TensorSpec([None, HEADS, None, HEAD_DIM], tf.float32)

    @tf.function(input_signature=[spec, spec, spec, tf.TensorSpec([None, None], tf.int32)])
    def scalable(q, k, v, ids):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            out = (local_block_attention(q, k, v, ids, 2)
                   + chunked_global_attention(q, k, v, ids, 4))
            loss = tf.reduce_sum(out * tf.cast(ids != 0, tf.float32)[:, None, :, None] ** 2)
        return out, tape.gradient(loss, [q, k, v])

    def plain(q, k, v, ids):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            out = plain_attention(q, k, v, ids, 2)[0] + plain_attention(q, k, v, ids)[0]
            loss = tf.reduce_sum(out * tf.cast(ids != 0, tf.float32)[:, None, :, None] ** 2)
        return out, tape.gradient(loss, [q, k, v])

    (out, grads), (expected, expected_grads) = scalable(q, k, v, ids), plain(q, k, v, ids)
    real = _real(ids)
    np.testing.assert_allclose(_time_major(out)[real], _time_major(expected)[real], atol=1e-5)
    for grad, expected_grad in zip(grads, expected_grads):
        np.testing.assert_allclose(grad.numpy(), expected_grad.numpy(), atol=1e-5)


def test_local_blocks_hold_no_length_squared_tensor():
    """The largest tensor of block-local attention grows linearly with the length."""
    def largest(length):
        spec = tf.TensorSpec([1, HEADS, length, HEAD_DIM], tf.float32)
        graph = tf.function(lambda q, k, v, ids: local_block_attention(q, k, v, ids, 4)
                            ).get_concrete_function(spec, spec, spec,
                                                    tf.TensorSpec([1, length], tf.int32)).graph
        sizes = [np.prod(t.shape.as_list()) for op in graph.get_operations() for t in op.outputs
                 if t.shape.rank and t.shape.is_fully_defined()]
        return max(sizes)

    assert largest(1024) == 2 * largest(512)
    assert largest(1024) < 1024 * 1024


@pytest.mark.parametrize("theta", [10000.0, 160000.0])
def test_rope_is_the_closed_form_rotation(theta):
    """keras-hub's RotaryEmbedding rotates dimension pairs (j, j + d/2) by position * theta^(-2j/d)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 9, HEADS, 8)).astype("float32")
    positions = np.array([np.arange(9), [0, 1, 2, 0, 1, 0, 1, 2, 3]])
    rotated = RotaryEmbedding(max_wavelength=theta)(x, positions=positions).numpy()
    half = 4
    angles = positions[:, :, None, None] * theta ** (-2.0 * np.arange(half) / 8)
    first, second = x[..., :half].astype(np.float64), x[..., half:].astype(np.float64)
    expected = np.concatenate([first * np.cos(angles) - second * np.sin(angles),
                               second * np.cos(angles) + first * np.sin(angles)], axis=-1)
    np.testing.assert_allclose(rotated, expected, atol=1e-5)
    # Without positions: 0, 1, 2, ... (the first row).
    np.testing.assert_allclose(RotaryEmbedding(max_wavelength=theta)(x).numpy()[0],
                               expected[0], atol=1e-5)


# A forward pass of 8,192 tokens through a tiny 3-layer ModernBERT (one global,
# two local layers), in a fresh process so its peak memory is its own.
_LONG_FORWARD = """
import resource, sys
import numpy as np
from kbert.models import ModernBertEncoder
encoder = ModernBertEncoder(vocabulary_size=99, num_layers=3, num_heads=4, hidden_dim=64,
                            intermediate_dim=96, max_sequence_length=8192)
inputs = {name: np.ones((1, 8192), "int32") for name in ("token_ids", "padding_mask")}
inputs["segment_ids"] = np.zeros((1, 8192), "int32")
encoder({name: value[:, :16] for name, value in inputs.items()})
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
output = encoder(inputs)["sequence_output"].numpy()
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(*output.shape, bool(np.isfinite(output).all()), round(grown))
"""


@pytest.mark.slow
def test_8192_tokens_run_in_a_fraction_of_full_attentions_memory():
    """Full attention's scores alone would take 4 heads x 8192^2 x 4 bytes = 1 GiB per layer."""
    import subprocess
    import sys

    from tests.conftest import REPO
    from tests.training.pretraining_data import subprocess_env

    result = subprocess.run([sys.executable, "-c", _LONG_FORWARD], cwd=REPO,
                            env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    *shape, finite, grown_mib = result.stdout.split()
    assert shape == ["1", "8192", "64"] and finite == "True"
    assert int(grown_mib) < 512  # measured: 237 MiB on 2 CPU cores
