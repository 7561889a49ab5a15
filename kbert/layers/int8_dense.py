"""int8 `Dense` / `EinsumDense`: int8 weights, per-token uint8 activations, exact integer sums.

`quantize_int8(model)` switches the encoder's projection layers (attention
query/key/value/output and the feed-forward pair, keras-hub's and Keras's
`Dense` and `EinsumDense`) to these classes in place, as `use_fast_layers`
switches Dropout and LayerNormalization: same objects and names; the float
kernel is replaced by an int8 one and only `call` changes.

Numerics: weights are symmetric int8 per output channel (scale = max|w| / 127).
Activations are quantized per row (per token) to uint8 over the row's own
`[min(x, 0), max(x)]`, rounding half up, so a row's answer does not depend on
what else is in its batch (server-side batching changes no answer). The integer
products `q_x @ q_w` are summed exactly (then rounded to float32 once) and scaled:
`y = step_row * scale_col * (q_x @ q_w) + lo_row * colsum_w` (`colsum_w` =
column sums of the dequantized weights: the zero-point correction of the
shift by `lo_row`).

Two forms compute those integer sums (`INT8_MATMULS`), with the same answers:

- `portable` (the default; what `kbert-export --quantize=int8` writes): float32
  matmuls of the integer values over slices of at most `EXACT_FLOAT32_TERMS`
  (518) of the contracted axis, added up exactly. A sum of at most 518 products
  of `[0, 255] x [-127, 127]` stays below 2**24, so float32 holds every partial
  sum exactly in whatever order the matmul adds (one float32 matmul over
  BERT-base's 768 or 3072 would round sums past 2**24); the integer inputs
  have at most 8 significant bits, so they stay exact even where a matmul
  rounds its inputs to bfloat16 or TF32. Core TensorFlow ops only: the
  SavedModel runs the same on any CPU and any TensorFlow build, stock TF
  Serving included.
- `onednn`: TensorFlow's fused `QuantizedMatMulWithBiasAndDequantize` (the op
  Intel Neural Compressor's int8 graphs use), oneDNN's int8 GEMM. It is exact
  only where oneDNN runs it with VNNI or AMX int8 instructions: measured on an
  AVX2-only AMD EPYC, TensorFlow leaves oneDNN off there by default and the op
  returns no output (an empty tensor eagerly, "Missing 0-th output" in a
  graph), and with `TF_ENABLE_ONEDNN_OPTS=1` it answers wrongly (AVX2's 16-bit
  pair sums saturate). `onednn_int8_problem()` asks the op once per process
  (a 2 x 64 probe with saturating values, checked exactly against numpy), and
  `quantize_int8(model, matmul="onednn")` is refused, naming the CPU
  capability, where it fails.

Why exports hold the portable form: a SavedModel outlives the machine that
wrote it, and a graph holding the fused op cannot guard itself (a probe node
inside it fails with it), so one exported on an AVX-512 VNNI machine would fail
or, with oneDNN forced on, answer wrongly on the AVX2 machines many cloud VMs
are; TensorFlow builds without oneDNN have no kernel for it at all. What that
costs: nothing on CPUs without VNNI, where the fused op cannot run; on CPUs
with it, the fused op's gain over float32, which `benchmarks/quantization.py`
measured only at larger batches (BENCHMARKS.md), and for the TensorFlow int8
graph alone: kbert-serve runs the ONNX Runtime int8 model beside the SavedModel
(`kbert.export.onnxruntime_int8`) for every model whose signatures run it once
per text. The portable form itself runs below float32's speed (the same float32
matmuls, plus the rows' quantization and the int32 sums), as
`benchmarks/int8_matmul.py` (one projection) and `benchmarks/quantization.py`
(whole models) measure: a TensorFlow int8 export buys 4x smaller matmul
weights, not speed.

Other mechanisms, measured on a 768 x 3072 projection: Keras's own
`layer.quantize("int8")` stores the same per-channel int8 weights but
multiplies with `tf.matmul(int8, int8) -> int32`, Eigen's integer GEMM without
int8 instructions (several times slower than float32);
TensorFlow's `QuantizedMatMul` (gemmlowp; uint8 x uint8 only) is exact but
slower than the sliced float32 matmuls. A TFLite/LiteRT model would need
tensorflow-text's ops as Select TF ops and a second runtime in kbert-serve.
"""

from __future__ import annotations

import functools
import os

import keras
import numpy as np
import tensorflow as tf

# The forms of the integer matmul (see the module docstring).
INT8_MATMULS = ("portable", "onednn")
# The ops the `onednn` form adds to a graph; `kbert.export.check_ops` reports them.
ONEDNN_INT8_OPS = ("QuantizedMatMulWithBiasAndDequantize",)
# The largest product of a uint8 activation and an int8 weight, in magnitude.
_LARGEST_PRODUCT = 255 * 127
# Longest slice of the contracted axis whose sums float32 holds exactly (below 2**24): 518.
EXACT_FLOAT32_TERMS = 2 ** 24 // _LARGEST_PRODUCT
# Longest contracted axis whose exact sums int32 holds: 66,313. Wider layers stay float32.
MAX_INT32_TERMS = (2 ** 31 - 1) // _LARGEST_PRODUCT
# A row's quantization step is its width times this: 255 steps from its low to its high end.
_ONE_255TH = np.float32(1 / 255)
# Layers with fewer inputs or outputs than this stay float32: a task's output
# layer (a few classes or tags) keeps its logits exact, and its matmul is too
# small to gain anything.
MIN_QUANTIZED_WIDTH = 16


def quantize_rows(rows: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Quantizes each row of `rows` to 256 steps over its own `[min(row, 0), max(row)]`.

    Args:
        rows: float32 `[n, k]`.

    Returns:
        `(low, step, quantized)`: float32 `[n, 1]`, `[n, 1]` and `[n, k]`, where
        `quantized` holds the integers 0..255 and `rows ~ low + step * quantized`.

    Example:

    >>> low, step, quantized = quantize_rows(tf.constant([[-1.0, 0.0, 1.55]]))
    >>> quantized.numpy()
    array([[  0., 100., 255.]], dtype=float32)
    """
    low = tf.minimum(tf.reduce_min(rows, axis=-1, keepdims=True), 0.0)
    width = tf.maximum(tf.reduce_max(rows, axis=-1, keepdims=True) - low, 1e-30)
    # No division by a constant: Grappler turns `x / 255` into `x * (1 / 255)` in
    # graphs only, and the integers would then depend on eager or graph execution.
    step = width * _ONE_255TH
    # Rounded half up, as TensorFlow's QuantizeV2 rounds, in plain ops so that every
    # TensorFlow build and both matmul forms see the same integers.
    quantized = tf.clip_by_value(tf.floor((rows - low) * (255.0 / width) + 0.5), 0.0, 255.0)
    return low, step, quantized


def portable_int8_product(quantized: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """`quantized @ kernel`, summed exactly and rounded to float32 once, in core TensorFlow ops.

    Float32 matmuls over slices of at most `EXACT_FLOAT32_TERMS` of the
    contracted axis, each exact (every partial sum stays below 2**24). Two such
    sums are added in float32, which rounds once, as a cast of their exact sum
    would; three or more (BERT-base's 3072-wide layers) are summed in int32 and
    then cast. Hand-written: TensorFlow's integer matmuls are Eigen's GEMM
    without int8 instructions (`tf.matmul` on int32) or gemmlowp's
    (`QuantizedMatMul`, uint8 x uint8), both slower here.

    Args:
        quantized: float32 `[n, k]` holding integers in [0, 255].
        kernel: int8 `[k, m]`, values in [-127, 127].

    Returns:
        float32 `[n, m]`: the exact sums, rounded to float32 (exact below 2**24).

    Example:

    >>> portable_int8_product(tf.fill([1, 1101], 255.0), tf.fill([1101, 1], np.int8(127)))
    <tf.Tensor: shape=(1, 1), dtype=float32, numpy=array([[3.5655884e+07]], dtype=float32)>
    """
    terms = int(kernel.shape[0])
    slices = -(-terms // EXACT_FLOAT32_TERMS)
    width = -(-terms // slices)
    sizes = [width] * (slices - 1) + [terms - width * (slices - 1)]
    sums = [tf.matmul(x, tf.cast(w, tf.float32))
            for x, w in zip(tf.split(quantized, sizes, axis=1), tf.split(kernel, sizes, axis=0))]
    if len(sums) <= 2:
        return tf.add_n(sums)
    return tf.cast(tf.add_n([tf.cast(s, tf.int32) for s in sums]), tf.float32)


def onednn_int8_product(quantized: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """`quantized @ kernel` by oneDNN's fused int8 matmul (exact only where
    `onednn_int8_problem()` is None).

    Args:
        quantized: float32 `[n, k]` holding integers in [0, 255].
        kernel: int8 `[k, m]`, values in [-127, 127].

    Returns:
        float32 `[n, m]`: the op called with unit ranges returns its int32
        accumulator as float32.

    Example:

    >>> if onednn_int8_problem() is None:
    ...     onednn_int8_product(tf.fill([1, 64], 255.0), tf.fill([64, 1], np.int8(127)))
    <tf.Tensor: shape=(1, 1), dtype=float32, numpy=array([[2072640.]], dtype=float32)>
    """
    return tf.raw_ops.QuantizedMatMulWithBiasAndDequantize(
        a=tf.bitcast(tf.cast(quantized, tf.uint8), tf.quint8), b=tf.bitcast(kernel, tf.qint8),
        bias=tf.zeros([kernel.shape[1]], tf.float32), min_a=0.0, max_a=255.0, min_b=-127.0,
        max_b=127.0, min_freezed_output=0.0, max_freezed_output=0.0, Toutput=tf.float32,
        input_quant_mode="SCALED")


_CAPABILITY = ("oneDNN's int8 matmul needs a CPU with VNNI (AVX-512 VNNI or AVX-VNNI) or "
               "AMX-INT8 instructions, and oneDNN on")


@functools.cache
def onednn_int8_problem() -> str | None:
    """Why oneDNN's fused int8 matmul cannot be used in this process, or None where it is exact.

    Asks the op once per process (the answer is cached): a `[2, 64] x [64, 16]`
    product whose sums are 2**21 in size and whose pairs of products overflow
    16 bits (what CPUs without VNNI get wrong), checked exactly against numpy.
    Not read from `/proc/cpuinfo`: whether TensorFlow runs the op through
    oneDNN also depends on its build and on `TF_ENABLE_ONEDNN_OPTS`.

    Returns:
        str or None. What the op did, and the CPU capability it needs.

    Example:

    >>> onednn_int8_problem()  # on an AVX2-only CPU
    'QuantizedMatMulWithBiasAndDequantize returned no output (shape (0,) for (2, 16)): ...'
    """
    rng = np.random.default_rng(0)
    quantized = np.stack([np.full(64, 255), rng.integers(0, 256, 64)]).astype(np.float32)
    kernel = rng.choice(np.array([-127, 127], np.int8), size=(64, 16))
    kernel[:, 0] = 127
    expected = (quantized.astype(np.int64) @ kernel.astype(np.int64)).astype(np.float32)
    op = ONEDNN_INT8_OPS[0]
    setting = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    with tf.init_scope():  # eagerly, even when first asked while tracing a function
        try:
            found = onednn_int8_product(tf.constant(quantized), tf.constant(kernel)).numpy()
        except tf.errors.OpError as e:
            return (f"this TensorFlow cannot run {op} ({type(e).__name__}: "
                    f"{str(e).splitlines()[0]}): a build without oneDNN. {_CAPABILITY}.")
    if found.shape != expected.shape:
        return (f"{op} returned no output (shape {found.shape} for {expected.shape}): oneDNN is "
                f"off in this process (TF_ENABLE_ONEDNN_OPTS={setting or 'unset'}; TensorFlow "
                "turns it on by default only on CPUs with AVX-512 VNNI, AVX-VNNI, AVX512-BF16 or AMX). "
                f"{_CAPABILITY}.")
    if not np.array_equal(found, expected):
        return (f"{op} answered wrongly (off by up to {np.abs(found - expected).max():.0f} on "
                f"sums up to {np.abs(expected).max():.0f}): this CPU lacks those instructions and "
                f"the 16-bit pair sums of its int8 GEMM saturate. {_CAPABILITY}.")
    return None


class _Int8Projection:
    """The int8 `call` shared by `Int8Dense` and `Int8EinsumDense`.

    The layer holds `int8_kernel` (int8 `[in_features, out_features]`),
    `int8_scale` and `int8_column_sum` (float32 `[out_features]`); the float
    kernel is gone. `int8_matmul` is the form of its integer matmul
    (`INT8_MATMULS`), `_in_rank` how many trailing input axes are contracted,
    `_out_shape` the kernel's output axes.
    """

    def _int8_matmul(self, inputs):
        x = tf.convert_to_tensor(inputs)
        dtype = x.dtype
        x = tf.cast(x, tf.float32)
        shape = tf.shape(x)
        batch_shape = shape[:tf.rank(x) - self._in_rank]
        low, step, quantized = quantize_rows(tf.reshape(x, [-1, self.int8_kernel.shape[0]]))
        product = (onednn_int8_product if self.int8_matmul == "onednn" else portable_int8_product)
        sums = product(quantized, tf.convert_to_tensor(self.int8_kernel))
        y = (sums * step * tf.convert_to_tensor(self.int8_scale)
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


def _quantize_layer(layer, matmul: str) -> bool:
    view = _matmul_view(layer)
    if view is None or layer.lora_enabled or layer.quantization_mode is not None:
        return False
    in_rank, out_shape = view
    kernel = np.asarray(keras.ops.convert_to_numpy(layer._kernel), np.float32)
    matrix = kernel.reshape(int(np.prod(kernel.shape[:in_rank])), -1)
    if min(matrix.shape) < MIN_QUANTIZED_WIDTH or matrix.shape[0] > MAX_INT32_TERMS:
        return False
    max_abs = np.abs(matrix).max(axis=0)
    scale = np.where(max_abs > 0, max_abs / 127.0, 1.0).astype(np.float32)
    int8 = np.clip(np.round(matrix / scale), -127, 127).astype(np.int8)
    column_sum = (int8.astype(np.float32) * scale).sum(axis=0)
    # As Keras's own `quantize` does: the float kernel leaves the layer's
    # tracked state, so a SavedModel stores only the int8 one.
    layer._tracker.unlock()
    layer._untrack_variable(layer._kernel)
    # What `del layer._kernel` does, less the `gc.collect()` Keras' `Layer.__delattr__`
    # runs after untracking a variable: a full collection per layer took ~1.7 s in a
    # process holding TensorFlow graphs (22 s of a 13-layer export; a BERT-base has 73).
    super(keras.layers.Layer, layer).__delattr__("_kernel")
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
    layer.int8_matmul = matmul
    layer._in_rank = in_rank
    layer._out_shape = tuple(int(d) for d in out_shape)
    layer.__class__ = (Int8Dense if isinstance(layer, keras.layers.Dense) else Int8EinsumDense)
    return True


def quantize_int8(model: keras.layers.Layer, matmul: str = "portable") -> list[str]:
    """Switches `model`'s matmul layers to int8 in place; returns the paths of those switched.

    Every built `Dense` and one-matmul `EinsumDense` at least
    `MIN_QUANTIZED_WIDTH` wide on both sides is switched (in a BERT encoder:
    each block's query, key, value, attention output and feed-forward layers,
    and the pooler); embeddings, layer norms and thin output layers stay float32.
    The model is changed for good: quantize a copy to keep the float one.

    Args:
        model: a built Keras model or layer.
        matmul: str. The form of the integer matmul (`INT8_MATMULS`):
            `portable` (core TensorFlow ops; any CPU, and what a SavedModel
            should hold) or `onednn` (oneDNN's fused int8 op, for use in this
            process on a CPU where `onednn_int8_problem()` is None). Defaults
            to `portable`.

    Returns:
        list of str. The switched layers' paths, in model order.

    Raises:
        ValueError: an unknown `matmul`, or `onednn` where the op is not exact.

    Example:

    >>> switched = quantize_int8(classifier)
    >>> switched[0]
    'bert_encoder/transformer_layer_0/self_attention/query'
    """
    if matmul not in INT8_MATMULS:
        raise ValueError(f"matmul={matmul!r}; choose one of {', '.join(INT8_MATMULS)}.")
    problem = onednn_int8_problem() if matmul == "onednn" else None
    if problem:
        raise ValueError(f"matmul='onednn' refused: {problem} matmul='portable' computes the "
                         "same int8 arithmetic with core TensorFlow ops on any CPU.")
    switched = []
    for layer in model._flatten_layers(include_self=True):
        if (isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense))
                and not isinstance(layer, _Int8Projection) and layer.built
                and _quantize_layer(layer, matmul)):
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
