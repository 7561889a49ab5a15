"""int8 `Dense` / `EinsumDense`: int8 weights, dynamic int8 activations, oneDNN's int8 matmul.

`quantize_int8(model)` switches the encoder's projection layers (attention
query/key/value/output and the feed-forward pair, keras-hub's and Keras's
`Dense` and `EinsumDense`) to these classes in place, as `use_fast_layers`
switches Dropout and LayerNormalization: same objects and names; the float
kernel is replaced by an int8 one and only `call` changes.

Why this mechanism (measured on this repo's 2-core AVX-512-VNNI Xeon, a
768 x 3072 projection, `benchmarks/quantization.py` for whole models):

- Keras's own `layer.quantize("int8")` stores the same per-channel int8
  weights but multiplies with `tf.matmul(int8, int8) -> int32`, which
  TensorFlow runs in Eigen without int8 instructions: 10x *slower* than
  float32 (98 ms vs 10 ms for 128 rows).
- TensorFlow's `QuantizedMatMulWithBiasAndDequantize` (the op Intel Neural
  Compressor's int8 graphs use) runs on oneDNN's VNNI int8 GEMM: 2.3x faster
  than float32 at 128 rows, 1.45x at 4096 rows, with per-row activation scales;
  the SavedModel stays core TensorFlow (tokenization still in the graph), so
  kbert-serve loads it unchanged.
- A TFLite/LiteRT model would need tensorflow-text's ops as Select TF ops and a
  second runtime in kbert-serve; LiteRT is not installed here.

Numerics: weights are symmetric int8 per output channel (scale = max|w| / 127).
Activations are quantized per row (per token) to uint8 over the row's own
`[min(x, 0), max(x)]`, so a row's answer does not depend on what else is in
its batch (server-side batching changes no answer). Because the op takes one
scalar range per operand, it is called with unit ranges and the scales are
applied after it: `y = step_row * scale_col * (q_x @ q_w) + lo_row * colsum_w`
(`colsum_w` = column sums of the dequantized weights: the zero-point
correction of the shift by `lo_row`).

The op has a kernel only in TensorFlow builds with oneDNN (Linux x86 pip
wheels since TF 2.9) and runs only while oneDNN is on (`TF_ENABLE_ONEDNN_OPTS`
not `0`); `kbert.export.check_ops` reports it.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

# The ops an int8 layer adds to a graph that need a oneDNN TensorFlow build
# (`kbert.export.ops_check.ONEDNN_OPS` lists the same for the ops check).
ONEDNN_INT8_OPS = ("QuantizedMatMulWithBiasAndDequantize",)
# Layers with fewer inputs or outputs than this stay float32: a task's output
# layer (a few classes or tags) keeps its logits exact, and its matmul is too
# small to gain anything.
MIN_QUANTIZED_WIDTH = 16


class _Int8Projection:
    """The int8 `call` shared by `Int8Dense` and `Int8EinsumDense`.

    The layer holds `int8_kernel` (int8 `[in_features, out_features]`),
    `int8_scale` and `int8_column_sum` (float32 `[out_features]`); the float
    kernel is gone. `_in_rank` is how many trailing input axes are contracted,
    `_out_shape` the kernel's output axes.
    """

    def _int8_matmul(self, inputs):
        x = tf.convert_to_tensor(inputs)
        dtype = x.dtype
        x = tf.cast(x, tf.float32)
        shape = tf.shape(x)
        batch_shape = shape[:tf.rank(x) - self._in_rank]
        rows = tf.reshape(x, [-1, self.int8_kernel.shape[0]])
        # Per row: shift by min(x, 0) so every value is >= 0, then 255 uint8 steps.
        low = tf.minimum(tf.reduce_min(rows, axis=-1, keepdims=True), 0.0)
        step = tf.maximum(tf.reduce_max(rows, axis=-1, keepdims=True) - low, 1e-30) / 255.0
        quantized = tf.raw_ops.QuantizeV2(input=(rows - low) * (1.0 / step), min_range=0.0,
                                          max_range=255.0, T=tf.quint8, mode="SCALED")
        # Unit ranges: the op returns the exact int32 accumulator as float.
        accumulator = tf.raw_ops.QuantizedMatMulWithBiasAndDequantize(
            a=quantized.output, b=tf.bitcast(tf.convert_to_tensor(self.int8_kernel), tf.qint8),
            bias=tf.zeros([self.int8_kernel.shape[1]], tf.float32), min_a=0.0, max_a=255.0,
            min_b=-127.0, max_b=127.0, min_freezed_output=0.0, max_freezed_output=0.0,
            Toutput=tf.float32, input_quant_mode="SCALED")
        y = (accumulator * step * tf.convert_to_tensor(self.int8_scale)
             + low * tf.convert_to_tensor(self.int8_column_sum))
        y = tf.reshape(y, tf.concat([batch_shape, list(self._out_shape)], axis=0))
        return tf.cast(y, dtype)

    def call(self, inputs, training=None):
        x = self._int8_matmul(inputs)
        if self.bias is not None:
            x = x + tf.cast(self.bias, x.dtype)
        if self.activation is not None:
            x = self.activation(x)
        return x


class Int8Dense(_Int8Projection, keras.layers.Dense):
    """A built `keras.layers.Dense` after `quantize_int8`: int8 weights and matmul.

    Not built directly: `quantize_int8` switches a float layer's class and
    replaces its kernel.
    """


class Int8EinsumDense(_Int8Projection, keras.layers.EinsumDense):
    """A built `keras.layers.EinsumDense` after `quantize_int8`: int8 weights and matmul.

    Only equations that are one matmul (the contracted axes are the input's last
    and the kernel's first, as in multi-head attention's projections) are
    switched.
    """


def _matmul_view(layer) -> tuple[int, tuple[int, ...]] | None:
    """`(contracted input axes, kernel output shape)` if `layer` is one matmul, else None."""
    kernel_shape = tuple(layer._kernel.shape)
    if isinstance(layer, keras.layers.Dense):
        return 1, kernel_shape[1:]
    if not isinstance(layer, keras.layers.EinsumDense):
        return None
    inputs, rest = layer.equation.replace(" ", "").split(",")
    kernel, output = rest.split("->")
    if "." in layer.equation:
        return None
    contracted = [c for c in kernel if c in inputs and c not in output]
    n = len(contracted)
    if (not n or inputs[-n:] != "".join(contracted) or kernel[:n] != "".join(contracted)
            or output != inputs[:-n] + kernel[n:]):
        return None
    return n, kernel_shape[n:]


def _quantize_layer(layer) -> bool:
    view = _matmul_view(layer)
    if view is None or layer.lora_enabled or layer.quantization_mode is not None:
        return False
    in_rank, out_shape = view
    kernel = np.asarray(keras.ops.convert_to_numpy(layer._kernel), np.float32)
    matrix = kernel.reshape(int(np.prod(kernel.shape[:in_rank])), -1)
    if min(matrix.shape) < MIN_QUANTIZED_WIDTH:
        return False
    max_abs = np.abs(matrix).max(axis=0)
    scale = np.where(max_abs > 0, max_abs / 127.0, 1.0).astype(np.float32)
    int8 = np.clip(np.round(matrix / scale), -127, 127).astype(np.int8)
    column_sum = (int8.astype(np.float32) * scale).sum(axis=0)
    # As Keras's own `quantize` does: the float kernel leaves the layer's
    # tracked state, so a SavedModel stores only the int8 one.
    layer._tracker.unlock()
    layer._untrack_variable(layer._kernel)
    del layer._kernel
    layer.int8_kernel = layer.add_weight(name="int8_kernel", shape=int8.shape, dtype="int8",
                                         initializer="zeros", trainable=False)
    layer.int8_scale = layer.add_weight(name="int8_scale", shape=scale.shape,
                                        initializer="ones", trainable=False)
    layer.int8_column_sum = layer.add_weight(name="int8_column_sum", shape=scale.shape,
                                             initializer="zeros", trainable=False)
    layer._tracker.lock()
    layer.int8_kernel.assign(int8)
    layer.int8_scale.assign(scale)
    layer.int8_column_sum.assign(column_sum)
    layer._in_rank = in_rank
    layer._out_shape = tuple(int(d) for d in out_shape)
    layer.__class__ = (Int8Dense if isinstance(layer, keras.layers.Dense) else Int8EinsumDense)
    return True


def quantize_int8(model: keras.layers.Layer) -> list[str]:
    """Switches `model`'s matmul layers to int8 in place; returns the paths of those switched.

    Every built `Dense` and one-matmul `EinsumDense` at least
    `MIN_QUANTIZED_WIDTH` wide on both sides is switched (in a BERT encoder:
    each block's query, key, value, attention output and feed-forward layers,
    and the pooler); embeddings, layer norms and thin output layers stay float32.
    The model is changed for good: quantize a copy to keep the float one.

    Args:
        model: a built Keras model or layer.

    Returns:
        list of str. The switched layers' paths, in model order.

    Example:

    >>> switched = quantize_int8(classifier)
    >>> switched[0]
    'bert_encoder/transformer_layer_0/self_attention/query'
    """
    switched = []
    for layer in model._flatten_layers(include_self=True):
        if (isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense))
                and not isinstance(layer, _Int8Projection) and layer.built
                and _quantize_layer(layer)):
            switched.append(layer.path)
    return switched


def int8_layers(model: keras.layers.Layer) -> list[str]:
    """The paths of `model`'s int8 layers (those `quantize_int8` switched).

    Example:

    >>> len(int8_layers(classifier))
    13
    """
    return [layer.path for layer in model._flatten_layers(include_self=True)
            if isinstance(layer, _Int8Projection)]
