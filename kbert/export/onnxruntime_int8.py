"""int8 for kbert-serve: the model as an ONNX Runtime int8 graph beside the SavedModel.

Why ONNX Runtime: measured on the same models (see BENCHMARKS.md, onnxruntime_int8),
TensorFlow's oneDNN int8 (the SavedModel's own int8 graph,
`kbert.layers.quantize_int8`) barely beat float32 at batch 1, because TensorFlow's
oneDNN int8 matmul reorders its weights on every call; ONNX Runtime's int8
(`MatMulInteger`: int8 weights per output channel, uint8 activations quantized
per call) met the 2x aim (the model alone). TFLite cannot hold the raw-text
tokenizer ops without Select TF ops; OpenVINO was not measured. ONNX Runtime
runs only the model, between the SavedModel's own tokenization and
answer-making halves (`ServingModule.split_signatures`), so raw text in,
answers out stay the same.

`convert_int8(model, path)` converts the float32 model of a serving module
with tf2onnx and rewrites its matmuls as int8 with one activation range per
token (`quantize_per_token`: a text's answer does not depend on its batch);
`write_onnxruntime_files` puts it into a version's `assets.extra/onnxruntime/`
(which TF Serving ignores):

    model.int8.onnx            the model: token_ids, segment_ids, padding_mask -> outputs
    kbert_onnxruntime.json     which signatures it serves, and their halves' function names

The halves are saved in the SavedModel as functions of its root object (not
signatures, so clients see the same signatures as before): kbert-serve runs
`before`, the ONNX model, then `after`; stock TF Serving runs the SavedModel's
TensorFlow int8 signatures. `OnnxRuntimeModel` runs the ONNX model as a stand-in
for the Keras model, so that the export's quality check scores it through the
task's own evaluation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf

DIRECTORY = "onnxruntime"
MODEL_FILE = "model.int8.onnx"
MANIFEST_FILE = "kbert_onnxruntime.json"
# kbert.models.packed_rows.ENCODER_INPUTS, written out: the conversion's child process loads
# this file on its own and must not import kbert (and with it Keras).
INPUT_NAMES = ("token_ids", "segment_ids", "padding_mask")
OUTPUT_NAME = "outputs"
# ONNX opset of the conversion: ONNX Runtime 1.20 and later run it.
OPSET = 17


def split_function_names(signature: str) -> tuple[str, str]:
    """The root-object attribute names of a split signature's `before` and `after` halves."""
    return f"onnxruntime_before_{signature}", f"onnxruntime_after_{signature}"


def attach_split_functions(module) -> dict:
    """Sets each split signature's halves on `module`, so that the SavedModel saves them.

    Args:
        module: a `ServingModule` with `split_signatures()`.

    Returns:
        dict. Signature name -> `{"before": name, "after": name}`, the manifest's entries.
    """
    entries = {}
    for signature, (before, after) in sorted(module.split_signatures().items()):
        before_name, after_name = split_function_names(signature)
        setattr(module, before_name, before)
        setattr(module, after_name, after)
        entries[signature] = {"before": before_name, "after": after_name}
    return entries


def convert_int8(model, path: str, timeout_s: float = 3600) -> int:
    """Writes `model` (float32 Keras, the three encoder inputs) as a per-token int8 ONNX model.

    The model is saved as a temporary SavedModel, and a child process converts
    it (tf2onnx), folds its constants and quantizes it (ONNX Runtime), with
    protobuf's pure-Python messages. Why a child: tf2onnx rewrites every node's
    protobuf message once per optimizer pass (about 50 passes), and protobuf's
    default C++ (upb) messages keep each replaced copy in their arena until the
    conversion ends, so every pass added one copy of the weights. Measured in
    one process holding a BERT-base-shaped model (1.7 GB before converting):
    15.5 GB at the peak and 117 s; with pure-Python messages, which a process
    must choose before it first imports protobuf, 8.2 GB and 56 s. In a child,
    that memory is also returned when it exits.

    Args:
        model: the serving module's float32 model (`module.model`).
        path: str. The `.onnx` file to write.
        timeout_s: float. Longest the conversion may take.

    Returns:
        int. How many matmuls are in int8.

    Raises:
        ValueError: the conversion failed (its error output is quoted), or
            quantized no matmul.

    Example:

    >>> convert_int8(module.model, "model.int8.onnx")
    37
    """
    spec = [tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES]

    def forward(token_ids, segment_ids, padding_mask):
        inputs = {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}
        return {OUTPUT_NAME: tf.cast(model(inputs, training=False), tf.float32)}

    holder = tf.Module()
    holder.model_variables = list(model.variables)
    holder.forward = tf.function(forward, input_signature=spec, autograph=False)
    with tempfile.TemporaryDirectory(prefix="kbert-onnx-") as work:
        saved = os.path.join(work, "float32")
        tf.saved_model.save(holder, saved,
                            options=tf.saved_model.SaveOptions(experimental_custom_gradients=False))
        output = os.path.join(work, MODEL_FILE)
        env = dict(os.environ, PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python")
        try:
            result = subprocess.run([sys.executable, "-c", _CHILD, os.path.abspath(__file__), saved,
                                     output], env=env, capture_output=True, text=True,
                                    timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise ValueError(f"converting {model.name} to ONNX took over {timeout_s:g} s.") from None
        if result.returncode != 0:
            raise ValueError(f"converting {model.name} to ONNX failed (exit {result.returncode}):\n"
                             f"{result.stderr[-3000:]}")
        count = json.loads(result.stdout.strip().splitlines()[-1])["int8_matmuls"]
        tf.io.gfile.copy(output, path, overwrite=True)
    if not count:
        raise ValueError(f"ONNX Runtime quantized no matmul of {model.name}; export it in float32.")
    return count


def _convert_saved_model(saved_dir: str, path: str) -> int:
    """The child's work (`convert_int8`): the SavedModel's `forward` to an int8 ONNX file."""
    import onnx
    import tf2onnx
    spec = [tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES]
    loaded = tf.saved_model.load(saved_dir)  # holds the variables `forward` reads
    work = os.path.dirname(path)
    float32 = os.path.join(work, "float32.onnx")
    tf2onnx.convert.from_function(loaded.forward, input_signature=spec, opset=OPSET,
                                  custom_op_handlers={"Erfc": (erfc_as_erf, [])}, output_path=float32)
    del loaded
    converted = onnx.load(float32)
    _name_output(converted)
    _drop_unused_inputs(converted)
    onnx.save(converted, float32)
    del converted
    folded = os.path.join(work, "folded.onnx")
    _fold_constants(float32, folded)
    folded_model = onnx.load(folded)
    gemm_to_matmul(folded_model)
    count = quantize_per_token(folded_model)
    onnx.save(folded_model, path)
    return count


def write_onnxruntime_files(extra_dir: str, model_path: str, entries: dict,
                            int8_matmuls: int) -> dict:
    """Writes a version's `assets.extra/onnxruntime/`: the int8 ONNX model and its manifest.

    Args:
        extra_dir: str. The version's `assets.extra` directory.
        model_path: str. The int8 ONNX model (`convert_int8`).
        entries: dict from `attach_split_functions`.
        int8_matmuls: int. From `convert_int8` (recorded).

    Returns:
        dict. The manifest written (`kbert_onnxruntime.json`).
    """
    directory = os.path.join(extra_dir, DIRECTORY)
    tf.io.gfile.makedirs(directory)
    tf.io.gfile.copy(model_path, os.path.join(directory, MODEL_FILE), overwrite=True)
    manifest = {"format": "int8", "model": MODEL_FILE, "inputs": list(INPUT_NAMES),
                "output": OUTPUT_NAME, "int8_matmuls": int8_matmuls, "signatures": entries}
    with tf.io.gfile.GFile(os.path.join(directory, MANIFEST_FILE), "w") as f:
        f.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


class OnnxRuntimeModel:
    """An ONNX model run by ONNX Runtime, called as the Keras model it was converted from.

    `model(inputs, training=False)` returns the `outputs` tensor (inside
    `tf.function`s too, through `tf.numpy_function`), so a task's evaluation
    and serving modules run it where they would run the Keras model.

    Args:
        path: str. The `.onnx` file (`convert_int8`).
        name: str. A name for messages.

    Example:

    >>> model = OnnxRuntimeModel("export/sst2/1/assets.extra/onnxruntime/model.int8.onnx")
    >>> model({"token_ids": ids, "segment_ids": segments, "padding_mask": mask}).shape
    TensorShape([2, 2])
    """

    variables: tuple = ()

    def __init__(self, path: str, name: str = "onnxruntime_int8"):
        import onnxruntime

        with tf.io.gfile.GFile(path, "rb") as f:
            self.session = onnxruntime.InferenceSession(f.read(),
                                                        providers=["CPUExecutionProvider"])
        self.name = name
        self._inputs = [i.name for i in self.session.get_inputs()]

    def run(self, inputs: dict) -> np.ndarray:
        """The model's output for numpy (or tensor) encoder inputs."""
        return self.session.run([OUTPUT_NAME], {name: np.asarray(inputs[name], np.int32)
                                                for name in self._inputs})[0]

    def __call__(self, inputs: dict, training: bool = False) -> tf.Tensor:
        ids = [inputs[name] for name in INPUT_NAMES]

        def run(token_ids, segment_ids, padding_mask):
            return self.run(dict(zip(INPUT_NAMES, (token_ids, segment_ids, padding_mask))))

        outputs = tf.numpy_function(run, ids, tf.float32, stateful=False)
        outputs.set_shape([None, None])
        return outputs


def erfc_as_erf(ctx, node, name, args):
    """tf2onnx handler for TensorFlow's Erfc (Keras' exact GELU), which tf2onnx 1.17 lacks:
    ONNX has Erf, and erfc(x) = 1 - erf(x)."""
    from tf2onnx import utils

    node.type = "Erf"
    one = ctx.make_const(utils.make_name("one"), np.array(1.0, np.float32))
    ctx.insert_new_node_on_output("Sub", node.output[0], name=utils.make_name("erfc"),
                                  inputs=[one.output[0], node.output[0]])


def _name_output(model) -> None:
    """Names the graph's one output `outputs` (tf2onnx names it after the TF tensor)."""
    from onnx import helper

    (output,) = model.graph.output
    if output.name == OUTPUT_NAME:
        return
    old = output.name
    model.graph.node.append(helper.make_node("Identity", [old], [OUTPUT_NAME],
                                             name="kbert_outputs"))
    output.name = OUTPUT_NAME


def _drop_unused_inputs(model) -> None:
    """Removes graph inputs no node reads (an encoder that ignores `segment_ids`)."""
    read = {name for node in model.graph.node for name in node.input}
    for graph_input in [i for i in model.graph.input if i.name not in read]:
        model.graph.input.remove(graph_input)
    extra = [i.name for i in model.graph.input if i.name not in INPUT_NAMES]
    if extra:
        raise ValueError(f"the ONNX model needs inputs besides the encoder's: {extra}")


def _fold_constants(path: str, out_path: str) -> None:
    """ONNX Runtime's basic graph optimizations (constant folding), written out, so the
    quantizer sees the weights' reshapes and transposes as constant weights."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = out_path
    onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def gemm_to_matmul(model) -> int:
    """Rewrites each Gemm with a constant weight as MatMul (+ Add of its bias), in place.

    tf2onnx writes the attention projections (Keras EinsumDense on a reshaped
    input) as Gemm, and `quantize_per_token` (like ONNX Runtime's quantizers) rewrites
    MatMul, not Gemm: without this, half of each block's weights would stay float32.
    Neither tf2onnx nor ONNX Runtime has this rewrite. Returns the number rewritten.
    """
    from onnx import helper
    from onnx import numpy_helper

    graph = model.graph
    weights = {w.name: w for w in graph.initializer}
    nodes, rewritten = [], 0
    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        plain = (node.op_type == "Gemm" and node.input[1] in weights
                 and not attrs.get("transA", 0) and attrs.get("alpha", 1.0) == 1.0
                 and (len(node.input) < 3 or attrs.get("beta", 1.0) == 1.0))
        if not plain:
            nodes.append(node)
            continue
        weight = node.input[1]
        if attrs.get("transB", 0):
            value = np.ascontiguousarray(numpy_helper.to_array(weights[weight]).T)
            weight = f"{weight}_transposed"
            graph.initializer.append(numpy_helper.from_array(value, weight))
        product = node.output[0] if len(node.input) < 3 else f"{node.output[0]}_product"
        nodes.append(helper.make_node("MatMul", [node.input[0], weight], [product],
                                      name=f"{node.name}_matmul"))
        if len(node.input) >= 3:
            nodes.append(helper.make_node("Add", [product, node.input[2]], [node.output[0]],
                                          name=f"{node.name}_bias"))
        rewritten += 1
    del graph.node[:]
    graph.node.extend(nodes)
    return rewritten


# Weights are int8 in [-WEIGHT_LEVELS, WEIGHT_LEVELS], activations uint8 in [0, 255]: on a CPU
# without VNNI, MatMulInteger multiplies with AVX2's vpmaddubsw, which adds two uint8 x int8
# products into an int16 and saturates; 2 x 255 x 64 = 32,640 fits in it, 2 x 255 x 127 does not
# (see BENCHMARKS.md, int8_matmul).
WEIGHT_LEVELS = 64
ACTIVATION_LEVELS = 255
_MIN_WIDTH = 16  # a matmul narrower than this (a 2-class output layer) stays float32


def quantize_per_token(model) -> int:
    """Rewrites each MatMul with a constant 2-D weight as int8, one activation range per token.

    Each row (token) of a matmul's input gets its own uint8 range (its min and
    max, widened to hold 0); weights are int8 per output column. So a text's
    answer does not depend on the other texts of its batch or on their padding,
    and the int32 sums of `MatMulInteger` are exact. ONNX Runtime's
    `quantize_dynamic` takes one range over the whole `[batch, length, hidden]`
    input (`DynamicQuantizeLinear`), padding included, which moved SST-2
    probabilities between batch 1 and batch 32, and has no per-row option: hence
    this rewrite (see BENCHMARKS.md, int8_batch_independence).

    For a row x with range [lo, lo + 255 step] and q = round((x - lo) / step):
    x @ W ~ (q @ Wq) * step * w_scale + lo * colsum(Wq) * w_scale.

    Args:
        model: an `onnx.ModelProto`, changed in place (float weights of the
            rewritten matmuls are dropped).

    Returns:
        int. How many matmuls were rewritten.

    Example:

    >>> quantize_per_token(onnx.load("model.onnx"))
    37
    """
    from onnx import helper
    from onnx import numpy_helper

    graph = model.graph
    weights = {w.name: w for w in graph.initializer}
    nodes, constants, quantized, count = [], [], {}, 0

    def constant(name: str, value, dtype=np.float32) -> str:
        constants.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(kind: str, inputs: list, output: str, **attrs) -> str:
        nodes.append(helper.make_node(kind, inputs, [output], name=output, **attrs))
        return output

    for node in graph.node:
        weight = (numpy_helper.to_array(weights[node.input[1]]).astype(np.float32)
                  if node.op_type == "MatMul" and node.input[1] in weights else None)
        if weight is None or weight.ndim != 2 or min(weight.shape) < _MIN_WIDTH:
            nodes.append(node)
            continue
        count += 1
        name, x = f"kbert_int8_{count}", node.input[0]
        if x not in quantized:  # the query, key and value projections share their input's
            quantized[x] = _quantize_rows(x, f"{name}_x", op, constant)
        codes, low, step = quantized[x]
        w_scale = np.maximum(np.abs(weight).max(0), 1e-30) / WEIGHT_LEVELS
        w_int8 = np.clip(np.round(weight / w_scale), -WEIGHT_LEVELS, WEIGHT_LEVELS).astype(np.int8)
        sums = op("Cast", [op("MatMulInteger", [codes, constant(f"{name}_w", w_int8, np.int8)],
                              f"{name}_int32")], f"{name}_sums", to=1)  # to float32
        scaled = op("Mul", [op("Mul", [sums, step], f"{name}_stepped"),
                            constant(f"{name}_scale", w_scale)], f"{name}_scaled")
        offset = op("Mul", [low, constant(f"{name}_offset", w_int8.sum(0, dtype=np.float64) * w_scale)],
                    f"{name}_low")
        nodes.append(helper.make_node("Add", [scaled, offset], [node.output[0]], name=f"{name}_y"))
    del graph.node[:]
    graph.node.extend(nodes)
    read = {name for node in graph.node for name in node.input}
    kept = [w for w in graph.initializer if w.name in read] + constants
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return count


def _quantize_rows(x: str, name: str, op, constant) -> tuple[str, str, str]:
    """uint8 codes of `x` with one range per row (last axis): `(codes, low, step)`."""
    low = op("Min", [op("ReduceMin", [x], f"{name}_min", axes=[-1], keepdims=1),
                     constant(f"{name}_zero", 0.0)], f"{name}_low")
    width = op("Max", [op("Sub", [op("ReduceMax", [x], f"{name}_max", axes=[-1], keepdims=1), low],
                          f"{name}_range"), constant(f"{name}_tiny", 1e-30)], f"{name}_width")
    inverse = op("Div", [constant(f"{name}_levels", float(ACTIVATION_LEVELS)), width], f"{name}_inverse")
    rounded = op("Floor", [op("Add", [op("Mul", [op("Sub", [x, low], f"{name}_shifted"), inverse],
                                          f"{name}_steps"), constant(f"{name}_half", 0.5)],
                              f"{name}_halfway")], f"{name}_rounded")
    step = op("Mul", [width, constant(f"{name}_unit", 1.0 / ACTIVATION_LEVELS)], f"{name}_step")
    return op("Cast", [rounded], f"{name}_codes", to=2), low, step  # to uint8


# The child of `convert_int8`: this file loaded on its own, not as part of the kbert
# package, so the child imports TensorFlow, tf2onnx and ONNX Runtime only (not Keras).
_CHILD = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("kbert_onnxruntime_int8", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(json.dumps({"int8_matmuls": module._convert_saved_model(sys.argv[2], sys.argv[3])}))
"""
