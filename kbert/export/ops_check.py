"""Checks that a SavedModel needs nothing but TensorFlow and tensorflow-text ops.

The stock `tensorflow_model_server` links TensorFlow's ops and tensorflow-text's
`ops_lib`, nothing else, and runs no Python. So the check loads the SavedModel
in a fresh, isolated Python process (`python -I`) that imports only
`tensorflow` and `tensorflow_text`, lists every op its graphs use, sorts them
into core TensorFlow, tensorflow-text and unknown, and fails on any unknown op
or on a load that needed anything else (kbert or Keras, say).

An int8 export (`kbert-export --quantize=int8`) uses core ops whose CPU kernels
exist only in TensorFlow builds with oneDNN and run only while oneDNN is on
(`ONEDNN_OPS`): the check lists them, and fails when the checking TensorFlow
has no CPU kernel for an op or has oneDNN turned off (`TF_ENABLE_ONEDNN_OPTS=0`),
since a server built or run that way could not answer.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

# Core ops with CPU kernels only in TensorFlow builds with oneDNN (the Linux x86
# pip wheels), used by int8 exports (`kbert.layers.int8_dense`). Kept here, not
# imported from kbert.layers, so the check stays a plain-TensorFlow script.
ONEDNN_OPS = ("QuantizedMatMulWithBiasAndDequantize",)

# Runs in the fresh process; prints one JSON line.
_SCRIPT = r"""
import json, os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
path = sys.argv[1]
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry

proto = saved_model_pb2.SavedModel()
with tf.io.gfile.GFile(os.path.join(path, "saved_model.pb"), "rb") as f:
    proto.ParseFromString(f.read())
ops = set()
for meta_graph in proto.meta_graphs:
    functions = {function.signature.name for function in meta_graph.graph_def.library.function}
    ops.update(node.op for node in meta_graph.graph_def.node)
    for function in meta_graph.graph_def.library.function:
        ops.update(node.op for node in function.node_def)
    ops -= functions
core = sorted(op for op in ops if op_def_registry.get(op) is not None)
import tensorflow_text  # noqa: F401  (registers its ops)
baseline = set(sys.modules)
text = sorted(op for op in ops if op not in core and op_def_registry.get(op) is not None)
unknown = sorted(ops - set(core) - set(text))
onednn = sorted(ops & set(sys.argv[2].split(",")))
no_kernel = []
if onednn:
    from tensorflow.python.framework import kernels
    no_kernel = [op for op in onednn if not any(
        k.device_type == "CPU" for k in kernels.get_registered_kernels_for_op(op).kernel)]
error = ""
if no_kernel:
    error = ("this TensorFlow has no CPU kernel for " + ", ".join(no_kernel)
             + " (a build without oneDNN)")
elif onednn and os.environ.get("TF_ENABLE_ONEDNN_OPTS", "").strip().lower() in ("0", "false"):
    error = ("TF_ENABLE_ONEDNN_OPTS=0 turns off oneDNN, which " + ", ".join(onednn)
             + " need; unset it")
if not unknown and not error:
    try:
        loaded = tf.saved_model.load(path)
        signatures = sorted(loaded.signatures.keys())
    except Exception as e:  # reported, not raised: the parent prints it
        error = f"{type(e).__name__}: {e}"
        signatures = []
else:
    signatures = []
extra_modules = sorted({name.split(".")[0] for name in set(sys.modules) - baseline
                        if name.split(".")[0] in ("kbert", "keras", "keras_hub", "tf_keras")})
print(json.dumps({"core": core, "text": text, "unknown": unknown, "error": error,
                  "signatures": signatures, "extra_modules": extra_modules, "onednn": onednn}))
"""


@dataclasses.dataclass
class OpsReport:
    """What `check_ops` found.

    Args:
        path: str. The SavedModel directory.
        core_ops: list of str. Ops of core TensorFlow.
        text_ops: list of str. Ops registered by tensorflow-text.
        unknown_ops: list of str. Ops from neither (the model would not load in
            a stock `tensorflow_model_server`).
        signatures: list of str. Signatures of the loaded model.
        error: str. Why loading failed, if it did.
        extra_modules: list of str. Top-level Python packages other than
            tensorflow/tensorflow_text that loading pulled in.
        onednn_ops: list of str. Ops that need TensorFlow with oneDNN
            (`ONEDNN_OPS`; int8 exports).
    """

    path: str
    core_ops: list[str]
    text_ops: list[str]
    unknown_ops: list[str]
    signatures: list[str]
    error: str = ""
    extra_modules: list[str] = dataclasses.field(default_factory=list)
    onednn_ops: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.unknown_ops or self.error or self.extra_modules)

    def message(self) -> str:
        """A one-paragraph verdict naming what is wrong, if anything."""
        if self.ok:
            return (f"{self.path}: loads with only tensorflow + tensorflow_text; "
                    f"{len(self.core_ops)} core ops, tensorflow-text ops: {', '.join(self.text_ops) or 'none'}; "
                    f"signatures: {', '.join(self.signatures)}."
                    + (f" Needs TensorFlow with oneDNN (Linux x86 pip wheels; not "
                       f"TF_ENABLE_ONEDNN_OPTS=0) for {', '.join(self.onednn_ops)}."
                       if self.onednn_ops else ""))
        problems = []
        if self.unknown_ops:
            problems.append(f"ops outside tensorflow and tensorflow_text: {', '.join(self.unknown_ops)}")
        if self.error:
            problems.append(f"loading failed: {self.error}")
        if self.extra_modules:
            problems.append(f"loading imported {', '.join(self.extra_modules)}")
        return (f"{self.path} would not serve from a stock tensorflow_model_server: "
                + "; ".join(problems) + ".")


def check_ops(saved_model_dir: str, python: str | None = None, timeout: float = 300.0) -> OpsReport:
    """Loads a SavedModel in a fresh process with only TensorFlow and tensorflow-text.

    Args:
        saved_model_dir: str. A SavedModel directory (one version).
        python: str or None. Interpreter to use. Defaults to this one.
        timeout: float. Seconds before giving up.

    Returns:
        An `OpsReport`; `report.ok` is False when anything else is needed.

    Example:

    >>> report = check_ops("export/sst2/1")
    >>> report.ok, report.text_ops
    (True, ['FastBertNormalize', 'FastWordpieceTokenizeWithOffsets', 'NormalizeUTF8'])
    """
    result = subprocess.run(
        [python or sys.executable, "-I", "-c", _SCRIPT, saved_model_dir, ",".join(ONEDNN_OPS)],
        capture_output=True, text=True, timeout=timeout,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode or not lines:
        tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        return OpsReport(saved_model_dir, [], [], [], [], error="the checking process failed: "
                         + " | ".join(tail))
    found = json.loads(lines[-1])
    return OpsReport(saved_model_dir, found["core"], found["text"], found["unknown"],
                     found["signatures"], found["error"], found["extra_modules"], found["onednn"])
