"""Signatures kbert-serve runs with ONNX Runtime: `before` (TensorFlow), the int8 model, `after`.

`kbert-export --quantize=int8` writes, for models whose signatures run the model
once per text (classification, regression, re-ranking, embeddings), the model
as an ONNX Runtime int8 graph beside the SavedModel, because ONNX Runtime's int8
kernels are several times float32's speed at batch 1 where TensorFlow's are not
(see BENCHMARKS.md, onnxruntime_int8). A version that has one holds:

    assets.extra/onnxruntime/kbert_onnxruntime.json
        {"model": "model.int8.onnx", "inputs": [...], "output": "outputs",
         "signatures": {"serving_default": {"before": NAME, "after": NAME}, ...}}
    assets.extra/onnxruntime/model.int8.onnx

`before` and `after` name functions saved on the SavedModel's root object (not
signatures, so stock TF Serving, which runs the SavedModel's own TensorFlow int8
signatures, and clients see the same signatures): `before` takes the
signature's inputs and returns the encoder inputs, `after` takes the model's
`outputs` and `padding_mask` and returns the signature's outputs. Tokenization
and answers stay TensorFlow's; only the model moves. This module reads that
layout and nothing of kbert (serving imports no other kbert package).
"""

from __future__ import annotations

import json
import os
from typing import Callable

import grpc
import numpy as np
import tensorflow as tf

from kbert.serving.errors import ServingError

MANIFEST = os.path.join("assets.extra", "onnxruntime", "kbert_onnxruntime.json")


class OnnxRuntimeSignature:
    """One signature as `after(onnx_model(before(inputs)))`.

    Called like the signature's TensorFlow function (keyword tensors in, a dict
    of tensors out), so `Servable.run` treats both alike.

    Args:
        before: the restored `before` function.
        session: `onnxruntime.InferenceSession` of the int8 model.
        output: str. The ONNX model's output name.
        after: the restored `after` function.
        where: str. The version, for error messages.
    """

    def __init__(self, before: Callable, session, output: str, after: Callable, where: str):
        self.before = before
        self.session = session
        self.output = output
        self.after = after
        self.where = where
        self.inputs = [i.name for i in session.get_inputs()]

    def __call__(self, **inputs: tf.Tensor) -> dict:
        encoder_inputs = self.before(**inputs)
        feed = {name: np.asarray(encoder_inputs[name], np.int32) for name in self.inputs}
        try:
            outputs = self.session.run([self.output], feed)[0]
        except Exception as e:  # onnxruntime's own exception types, from its C++ status
            raise ServingError(grpc.StatusCode.INTERNAL,
                               f"{self.where}: ONNX Runtime failed: {e}") from None
        return self.after(outputs=tf.constant(outputs),
                          padding_mask=encoder_inputs["padding_mask"])


def onnxruntime_signatures(path: str, loaded, signatures: list[str],
                           intra_op_threads: int = 0) -> dict:
    """The signatures of a version that its ONNX Runtime int8 model serves.

    Args:
        path: str. The version directory.
        loaded: its `tf.saved_model.load` object (holds the `before`/`after` functions).
        signatures: list of str. The SavedModel's signature names.
        intra_op_threads: int. Threads one model call may use (kbert-serve's
            `--onnxruntime_intra_op_parallelism`); 0: ONNX Runtime's choice, one
            per physical core.

    Returns:
        dict. Signature name -> `OnnxRuntimeSignature`; empty when the version
        has no ONNX model.

    Raises:
        ValueError: the manifest or model is unreadable, or names a function or
            signature the SavedModel lacks (the version is refused, as any
            broken file would make it).

    Example:

    >>> onnxruntime_signatures("export/sst2/1", tf.saved_model.load("export/sst2/1"), ["serving_default"])
    {'serving_default': <OnnxRuntimeSignature>, ...}
    """
    manifest_path = os.path.join(path, MANIFEST)
    if not tf.io.gfile.exists(manifest_path):
        return {}
    try:
        with tf.io.gfile.GFile(manifest_path) as f:
            manifest = json.load(f)
        model_file = os.path.join(os.path.dirname(manifest_path), manifest["model"])
        output = manifest["output"]
        entries = manifest["signatures"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{manifest_path}: not a kbert ONNX Runtime manifest ({e}).") from None
    try:
        import onnxruntime
    except ImportError:
        raise ValueError(f"{path} has an ONNX Runtime int8 model and onnxruntime is not installed: "
                         "pip install onnxruntime, or run kbert-serve --noonnxruntime (the "
                         "SavedModel's TensorFlow int8 graph).") from None
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1  # the graph runs in order (ORT_SEQUENTIAL): no second pool
    # ONNX Runtime's idle pool threads spin, waiting for work, by default: on a CPU shared with
    # other processes (or with this server's other sessions and batch threads) they take the
    # cores the work needs (see BENCHMARKS.md, int8_batch_independence). Off, idle threads sleep.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    with tf.io.gfile.GFile(model_file, "rb") as f:
        session = onnxruntime.InferenceSession(f.read(), options,
                                               providers=["CPUExecutionProvider"])
    where = os.path.basename(os.path.normpath(path))
    found = {}
    for signature, entry in entries.items():
        if signature not in signatures:
            raise ValueError(f"{manifest_path} names signature {signature!r}, which the SavedModel "
                             f"lacks (it has {sorted(signatures)}).")
        halves = [getattr(loaded, entry.get(half, ""), None) for half in ("before", "after")]
        if not all(callable(h) for h in halves):
            raise ValueError(f"{manifest_path}: the SavedModel has no functions {entry} for "
                             f"signature {signature!r}.")
        found[signature] = OnnxRuntimeSignature(halves[0], session, output, halves[1],
                                                f"version {where} signature {signature!r}")
    return found
