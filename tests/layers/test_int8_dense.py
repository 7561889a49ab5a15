"""int8 layers: the stated arithmetic in both matmul forms, exact integer sums, the oneDNN probe.

Every test runs on any x86 CPU. Where oneDNN's fused int8 matmul is not exact
here (`onednn_int8_problem()`: an AVX2-only CPU, or oneDNN off), the tests of
the `onednn` form check that it is refused with the reason, and run the
`portable` form in its place.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from kbert.layers import Int8Dense
from kbert.layers import Int8EinsumDense
from kbert.layers import quantize_int8
from kbert.layers.int8_dense import EXACT_FLOAT32_TERMS
from kbert.layers.int8_dense import INT8_MATMULS
from kbert.layers.int8_dense import onednn_int8_problem
from kbert.layers.int8_dense import onednn_int8_product
from kbert.layers.int8_dense import portable_int8_product
from kbert.layers.int8_dense import quantize_rows

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _reference_int8(x, kernel):
    """numpy: per-channel int8 weights, per-row uint8 activations over [min(x, 0), max(x)]."""
    scale = np.abs(kernel).max(axis=0) / 127.0
    q_w = np.clip(np.round(kernel / scale), -127, 127)
    # The activations' float32 arithmetic as the graph does it, so that rounding agrees.
    x = x.astype(np.float32)
    low = np.minimum(x.min(axis=-1, keepdims=True), np.float32(0))
    width = x.max(axis=-1, keepdims=True) - low
    step = width * np.float32(1 / 255)
    q_x = np.clip(np.floor((x - low) * (np.float32(255) / width) + np.float32(0.5)), 0, 255)  # half up
    step, low, q_x = (v.astype(np.float64) for v in (step, low, q_x))
    return step * (q_x @ q_w) * scale + low * (q_w * scale).sum(axis=0)


@pytest.fixture(params=INT8_MATMULS)
def matmul(request):
    """Each matmul form that works here; `onednn` where it does not: its refusal, then `portable`."""
    if request.param == "onednn" and onednn_int8_problem():
        layer = keras.layers.Dense(32)
        layer.build((None, 32))
        with pytest.raises(ValueError, match=r"matmul='onednn' refused: .*needs a CPU with VNNI "
                                             r"\(AVX-512 VNNI or AVX-VNNI\) or AMX-INT8"):
            quantize_int8(layer, matmul="onednn")
        assert type(layer) is keras.layers.Dense  # refused before any layer was switched
        return "portable"
    return request.param


def test_int8_dense_computes_the_stated_int8_arithmetic_and_drops_the_float_kernel(matmul):
    rng = np.random.default_rng(0)
    layer = keras.layers.Dense(48, activation="relu")
    layer.build((None, 5, 40))
    x = rng.standard_normal((3, 5, 40)).astype(np.float32)
    kernel, bias = layer.kernel.numpy(), layer.bias.numpy()
    float_y = layer(x).numpy()
    assert quantize_int8(layer, matmul=matmul) == [layer.path]
    assert type(layer) is Int8Dense and layer.int8_matmul == matmul
    assert [w.name for w in layer.weights] == ["bias", "int8_kernel", "int8_scale", "int8_column_sum"]
    assert layer.int8_kernel.dtype == "int8" and layer.int8_kernel.shape == (40, 48)
    y = layer(x).numpy()
    expected = np.maximum(_reference_int8(x.reshape(15, 40), kernel) + bias, 0)
    np.testing.assert_allclose(y.reshape(15, 48), expected, atol=2e-5, rtol=1e-4)
    # int8, not float: the answer moved, by about one quantization step.
    assert 1e-4 < np.abs(y - float_y).max() < 0.05 * np.abs(float_y).max()
    # A row's answer does not depend on the other rows of its batch (server batching).
    np.testing.assert_allclose(layer(x[1:2]).numpy(), y[1:2], atol=1e-6)
    # Traced into a graph, as a SavedModel holds it: the same integers (graph rewrites
    # may only reorder the float32 multiplications after the exact sums).
    np.testing.assert_allclose(tf.function(layer)(x).numpy(), y, rtol=1e-6, atol=1e-6)


def test_attention_einsum_layers_are_quantized_and_thin_output_layers_stay_float(matmul):
    rng = np.random.default_rng(1)
    query = keras.layers.EinsumDense("abc,cde->abde", output_shape=(None, 4, 8), bias_axes="de")
    query.build((None, 6, 32))
    output = keras.layers.EinsumDense("abcd,cde->abe", output_shape=(None, 32), bias_axes="e")
    output.build((None, 6, 4, 8))
    thin = keras.layers.Dense(2)
    thin.build((None, 32))
    x = rng.standard_normal((2, 6, 32)).astype(np.float32)
    h = rng.standard_normal((2, 6, 4, 8)).astype(np.float32)
    q_kernel, o_kernel = query.kernel.numpy(), output.kernel.numpy()
    q_bias, o_bias = query.bias.numpy(), output.bias.numpy()
    for layer in (query, output, thin):
        quantize_int8(layer, matmul=matmul)
    assert (type(query), type(output), type(thin)) == (Int8EinsumDense, Int8EinsumDense,
                                                        keras.layers.Dense)
    expected_q = _reference_int8(x.reshape(12, 32), q_kernel.reshape(32, 32))
    np.testing.assert_allclose(query(x).numpy(),
                               expected_q.reshape(2, 6, 4, 8) + q_bias, atol=2e-5, rtol=1e-4)
    expected_o = _reference_int8(h.reshape(12, 32), o_kernel.reshape(32, 32))
    np.testing.assert_allclose(output(h).numpy(), expected_o.reshape(2, 6, 32) + o_bias,
                               atol=2e-5, rtol=1e-4)


def _saturating_product(terms, rng):
    """uint8 x int8 values whose sums and 16-bit pair sums are as large as they get."""
    quantized = np.full((3, terms), 255, np.float32)
    quantized[1] = rng.integers(0, 256, terms)
    kernel = rng.choice(np.array([-127, 127], np.int8), size=(terms, 6))
    kernel[:, 0], kernel[:, 1] = 127, -127
    return quantized, kernel, quantized.astype(np.int64) @ kernel.astype(np.int64)


def _near_largest_sums(terms, rng):
    """Sums near 255 * 127 * terms, of every parity: as hard as sums get for float32."""
    quantized = rng.integers(250, 256, (2, terms)).astype(np.float32)
    quantized[0] = 255
    kernel = (127 - (rng.random((terms, 64)) < np.linspace(0, 0.05, 64))).astype(np.int8)
    return quantized, kernel, quantized.astype(np.int64) @ kernel.astype(np.int64)


@pytest.mark.parametrize("terms, slices", [(500, 1), (1000, 2), (1101, 3)])
def test_portable_sums_are_the_exact_sums_rounded_to_float32_once(terms, slices):
    quantized, kernel, exact = _near_largest_sums(terms, np.random.default_rng(5))
    assert EXACT_FLOAT32_TERMS == 518 and 518 * 255 * 127 < 2 ** 24 < 519 * 255 * 127
    sums = portable_int8_product(tf.constant(quantized), tf.constant(kernel)).numpy()
    np.testing.assert_array_equal(sums, exact.astype(np.float32))
    # What plain float32 sums would make of these inputs: past 2**24 a sum of all
    # terms in order drifts, and from three slices on, adding the slices' exact sums
    # in float32 rounds twice (so the layer adds those in int32).
    in_order = np.cumsum(quantized[:, :, None] * kernel, axis=1, dtype=np.float32)[:, -1]
    assert np.array_equal(in_order, exact.astype(np.float32)) == (slices == 1)
    width = -(-terms // slices)
    sliced = [quantized[:, i:i + width].astype(np.int64) @ kernel[i:i + width]
              for i in range(0, terms, width)]
    assert len(sliced) == slices and max(np.abs(s).max() for s in sliced) < 2 ** 24
    added = sliced[0].astype(np.float32)
    for part in sliced[1:]:
        added = added + part.astype(np.float32)
    assert np.array_equal(added, exact.astype(np.float32)) == (slices <= 2)


def _fused_answer(quantized, kernel):
    """The fused op's answer, or None where it raises or returns no output."""
    try:
        found = onednn_int8_product(tf.constant(quantized), tf.constant(kernel)).numpy()
    except tf.errors.OpError:
        return None
    return found if found.shape == (len(quantized), kernel.shape[1]) else None


def test_the_onednn_probe_says_what_the_fused_op_does_here():
    """None where the op is exact on a product the probe did not see; else why not."""
    quantized, kernel, exact = _saturating_product(300, np.random.default_rng(3))
    found = _fused_answer(quantized, kernel)
    problem = onednn_int8_problem()
    assert onednn_int8_problem() is problem  # asked once per process
    if problem is None:
        np.testing.assert_array_equal(found, exact.astype(np.float32))
    else:
        assert found is None or not np.array_equal(found, exact)
        assert "needs a CPU with VNNI (AVX-512 VNNI or AVX-VNNI) or AMX-INT8" in problem


_FORCED_ON = """
import json
import numpy as np
from tests.layers.test_int8_dense import _fused_answer, _saturating_product
from kbert.layers.int8_dense import onednn_int8_problem
quantized, kernel, exact = _saturating_product(300, np.random.default_rng(3))
found = _fused_answer(quantized, kernel)
answer = "none" if found is None else "exact" if np.array_equal(found, exact) else "wrong"
print(json.dumps({"problem": onednn_int8_problem(), "answer": answer}))
"""


def test_the_probe_catches_wrong_answers_with_onednn_forced_on():
    """`TF_ENABLE_ONEDNN_OPTS=1` (read once, when TensorFlow starts: a fresh interpreter).

    On a CPU with VNNI or AMX the op is exact and the probe passes; on an
    AVX2-only CPU the op answers, wrongly, and the probe says so.
    """
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1", TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO)
    result = subprocess.run([sys.executable, "-c", _FORCED_ON], env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    if found["answer"] == "exact":
        assert found["problem"] is None
    elif found["answer"] == "wrong":
        assert found["problem"].startswith("QuantizedMatMulWithBiasAndDequantize answered wrongly")
        assert "16-bit pair sums of its int8 GEMM saturate" in found["problem"]
    else:  # a TensorFlow without oneDNN's kernels
        assert "needs a CPU with VNNI" in found["problem"]


def test_an_unknown_matmul_form_is_refused():
    layer = keras.layers.Dense(32)
    layer.build((None, 32))
    with pytest.raises(ValueError, match=r"matmul='vnni'; choose one of portable, onednn"):
        quantize_int8(layer, matmul="vnni")


def test_rows_quantize_to_the_same_integers_eagerly_in_a_graph_and_in_numpy():
    """Grappler rewrites `x / 255` as `x * (1 / 255)` in graphs only: the quantization avoids it."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((64, 40)) * rng.uniform(0.01, 100, (64, 1))).astype(np.float32)
    x[0] = np.abs(x[0])  # a row with no negative value: low is 0
    eager = [t.numpy() for t in quantize_rows(tf.constant(x))]
    graph = [t.numpy() for t in tf.function(quantize_rows)(tf.constant(x))]
    low = np.minimum(x.min(axis=-1, keepdims=True), np.float32(0))
    width = x.max(axis=-1, keepdims=True) - low
    expected = [low, width * np.float32(1 / 255),
                np.clip(np.floor((x - low) * (np.float32(255) / width) + np.float32(0.5)), 0, 255)]
    for found in (eager, graph):
        for got, want in zip(found, expected):
            np.testing.assert_array_equal(got, want)
    assert eager[2].min() == 0 and eager[2].max() == 255 and eager[0][0, 0] == 0
