"""`quantize_per_token`: int8 matmuls whose answer for a token depends on that token alone.

A two-matmul ONNX graph (no TensorFlow, no export) is rewritten and run by ONNX
Runtime; its answers are checked against the same integer arithmetic in numpy
and across batches with different padding.
"""

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto
from onnx import helper
from onnx import numpy_helper

from kbert.export.onnxruntime_int8 import ACTIVATION_LEVELS
from kbert.export.onnxruntime_int8 import WEIGHT_LEVELS
from kbert.export.onnxruntime_int8 import quantize_per_token

HIDDEN, INNER, OUT = 48, 32, 2


def _weights():
    rng = np.random.default_rng(0)
    first = rng.normal(size=(HIDDEN, INNER)).astype(np.float32)
    first[:, 0] = 0.5  # a column of equal weights: all +64 once quantized
    return first, rng.normal(size=(INNER, OUT)).astype(np.float32)


def _model():
    """x [batch, length, HIDDEN] -> MatMul -> Relu -> MatMul (2 wide: stays float32) -> outputs."""
    first, second = _weights()
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "first"], ["hidden"]), helper.make_node("Relu", ["hidden"], ["relu"]),
         helper.make_node("MatMul", ["relu", "second"], ["outputs"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, HIDDEN])],
        [helper.make_tensor_value_info("outputs", TensorProto.FLOAT, [None, None, OUT])],
        [numpy_helper.from_array(first, "first"), numpy_helper.from_array(second, "second")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _session(model):
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _tokens(rows: int, length: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(rows, length, HIDDEN)).astype(np.float32)
    x[0, 0] = 3.0  # all codes 255 against the +64 column: AVX2's 16-bit pair sums would saturate at 127
    return x


def _numpy_int8(x: np.ndarray) -> np.ndarray:
    """The rewrite's arithmetic in numpy, integer products summed exactly."""
    first, second = _weights()
    low = np.minimum(x.min(-1, keepdims=True), 0.0)
    width = np.maximum(x.max(-1, keepdims=True) - low, 1e-30)
    codes = np.floor((x - low) * (np.float32(ACTIVATION_LEVELS) / width) + 0.5).astype(np.int64)
    scale = np.maximum(np.abs(first).max(0), 1e-30) / WEIGHT_LEVELS
    weights = np.clip(np.round(first / scale), -WEIGHT_LEVELS, WEIGHT_LEVELS).astype(np.int64)
    hidden = (codes @ weights) * (width / ACTIVATION_LEVELS) * scale + low * (weights.sum(0) * scale)
    return np.maximum(hidden, 0.0) @ second


def test_rewrites_the_wide_matmul_and_matches_the_exact_integer_arithmetic():
    model = _model()
    assert quantize_per_token(model) == 1  # the 2-wide output layer stays float32
    kinds = [node.op_type for node in model.graph.node]
    assert kinds.count("MatMulInteger") == 1 and kinds.count("MatMul") == 1
    assert "first" not in {w.name for w in model.graph.initializer}  # its float32 copy is dropped
    onnx.checker.check_model(model)
    x = _tokens(3, 5, seed=1)
    got = _session(model).run(["outputs"], {"x": x})[0]
    np.testing.assert_allclose(got, _numpy_int8(x.astype(np.float64)), rtol=1e-4, atol=1e-4)
    float32 = _session(_model()).run(["outputs"], {"x": x})[0]
    assert np.abs(got - float32).max() < 0.05 * np.abs(float32).max()


def test_a_rows_answer_alone_equals_its_answer_in_a_padded_batch_bit_for_bit():
    model = _model()
    quantize_per_token(model)
    session = _session(model)
    lengths = [7, 2, 5, 1]
    batch = _tokens(len(lengths), max(lengths), seed=2)
    for row, length in enumerate(lengths):
        batch[row, length:] = 50.0 * (row + 1)  # padding far outside the real tokens' range
    together = session.run(["outputs"], {"x": batch})[0]
    for row, length in enumerate(lengths):
        alone = session.run(["outputs"], {"x": batch[row:row + 1, :length]})[0]
        np.testing.assert_array_equal(alone[0], together[row, :length])
