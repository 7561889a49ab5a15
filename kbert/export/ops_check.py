"""Checks that a SavedModel needs nothing but TensorFlow and tensorflow-text ops.

The stock `tensorflow_model_server` links TensorFlow's ops and tensorflow-text's
`ops_lib`, nothing else, and runs no Python. So the check loads the SavedModel
in a fresh, isolated Python process (`python -I`) that imports only
`tensorflow` and `tensorflow_text`, lists every op its graphs use, sorts them
into core TensorFlow, tensorflow-text and unknown, and fails on any unknown op
or on a load that needed anything else (kbert or Keras, say).

Int8 exports by earlier kbert versions hold oneDNN's fused int8 matmul
(`kbert.layers.int8_dense.ONEDNN_INT8_OPS`), which answers correctly only on
CPUs with VNNI or AMX int8 instructions and oneDNN on, and fails or answers
wrongly elsewhere (today's int8 exports hold core-op arithmetic that runs
anywhere). For such a graph the check asks the op itself, in this process,
whether this machine's TensorFlow computes it exactly
(`kbert.layers.int8_dense.onednn_int8_problem`), fails if not, naming the CPU
capability, and warns if so.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

from kbert.layers.int8_dense import ONEDNN_INT8_OPS
from kbert.layers.int8_dense import onednn_int8_problem

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
error = ""
if not unknown:
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
        onednn_ops: list of str. oneDNN's fused int8 ops (`ONEDNN_INT8_OPS`:
            int8 exports of earlier kbert versions).
        onednn_problem: str. Why this machine cannot run them exactly
            (`onednn_int8_problem()`), if it cannot.
    """

    path: str
    core_ops: list[str]
    text_ops: list[str]
    unknown_ops: list[str]
    signatures: list[str]
    error: str = ""
    extra_modules: list[str] = dataclasses.field(default_factory=list)
    onednn_ops: list[str] = dataclasses.field(default_factory=list)
    onednn_problem: str = ""

    @property
    def ok(self) -> bool:
        return not (self.unknown_ops or self.error or self.extra_modules or self.onednn_problem)

    def message(self) -> str:
        """A one-paragraph verdict naming what is wrong, if anything."""
        if self.ok:
            return (f"{self.path}: loads with only tensorflow + tensorflow_text; "
                    f"{len(self.core_ops)} core ops, tensorflow-text ops: {', '.join(self.text_ops) or 'none'}; "
                    f"signatures: {', '.join(self.signatures)}."
                    + (f" It holds oneDNN's fused int8 matmul ({', '.join(self.onednn_ops)}, "
                       "an int8 export of an earlier kbert): exact on this machine, but it fails "
                       "or answers wrongly on CPUs without VNNI or AMX int8 instructions or with "
                       "oneDNN off; export it again with --quantize=int8 for a graph that runs "
                       "on any CPU." if self.onednn_ops else ""))
        problems = []
        if self.unknown_ops:
            problems.append(f"ops outside tensorflow and tensorflow_text: {', '.join(self.unknown_ops)}")
        if self.error:
            problems.append(f"loading failed: {self.error}")
        if self.extra_modules:
            problems.append(f"loading imported {', '.join(self.extra_modules)}")
        if self.onednn_problem:
            problems.append(f"it holds {', '.join(self.onednn_ops)} (an int8 export of an "
                            f"earlier kbert), which this machine cannot run: "
                            f"{self.onednn_problem} Export it again with --quantize=int8: int8 "
                            "exports now hold arithmetic that runs on any CPU")
        return (f"{self.path} would not serve from a stock tensorflow_model_server: "
                + "; ".join(problems) + ".")


def check_ops(saved_model_dir: str, python: str | None = None, timeout: float = 300.0) -> OpsReport:
    """Loads a SavedModel in a fresh process with only TensorFlow and tensorflow-text.

    Args:
        saved_model_dir: str. A SavedModel directory (one version).
        python: str or None. Interpreter to use. Defaults to this one (the
            probe of oneDNN's fused int8 matmul runs in this process either way).
        timeout: float. Seconds before giving up.

    Returns:
        An `OpsReport`; `report.ok` is False when anything else is needed.

    Example:

    >>> report = check_ops("export/sst2/1")
    >>> report.ok, report.text_ops
    (True, ['FastBertNormalize', 'FastWordpieceTokenizeWithOffsets', 'NormalizeUTF8'])
    """
    result = subprocess.run(
        [python or sys.executable, "-I", "-c", _SCRIPT, saved_model_dir,
         ",".join(ONEDNN_INT8_OPS)],
        capture_output=True, text=True, timeout=timeout,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode or not lines:
        tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        return OpsReport(saved_model_dir, [], [], [], [], error="the checking process failed: "
                         + " | ".join(tail))
    found = json.loads(lines[-1])
    problem = (onednn_int8_problem() or "") if found["onednn"] else ""
    return OpsReport(saved_model_dir, found["core"], found["text"], found["unknown"],
                     found["signatures"], found["error"], found["extra_modules"], found["onednn"],
                     problem)
