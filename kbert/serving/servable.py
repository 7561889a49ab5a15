"""One loaded version of one model: its signatures, input checks and execution."""

from __future__ import annotations

import logging
import os

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops the SavedModels use)
from tensorflow.core.protobuf import saved_model_pb2

from kbert.serving.errors import ServingError
from kbert.serving.errors import invalid
from kbert.serving.errors import op_error_cause
from kbert.serving.export_info import read_export_info
from kbert.serving.onnxruntime_signatures import onnxruntime_signatures
from kbert.serving.token_counts import truncation_length

import grpc

DEFAULT_SIGNATURE = "serving_default"
# The function kbert-export saves beside the signatures for `POST /tokenize`
# (kbert.export.tokenizer_function.TOKENIZE_FUNCTION; kbert.serving imports nothing of kbert).
TOKENIZE_FUNCTION = "tokenize"

_UNSAVED_GRADIENTS = "Importing a function (%s) with ops with unsaved custom gradients"


class _UnsavedGradientsFilter(logging.Filter):
    """Drops TensorFlow's load-time warning about unsaved custom gradients, and nothing else.

    kbert exports save no gradient functions (`SaveOptions(experimental_custom_gradients=False)`:
    serving computes none, and tracing them costs a tenth of an export), so loading one makes
    TensorFlow warn, once per function (14 lines for a few models), that a gradient "will likely
    fail". A server never asks for one: the warning is nobody's to act on. Matched on
    TensorFlow's own format string, so any other warning still shows.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(_UNSAVED_GRADIENTS))


# TensorFlow logs through absl's logger ("absl"), or "tensorflow" in other set-ups.
for _logger in map(logging.getLogger, ("absl", "tensorflow")):
    if not any(isinstance(f, _UnsavedGradientsFilter) for f in _logger.filters):
        _logger.addFilter(_UnsavedGradientsFilter())


def _dtype_name(dtype: tf.DType) -> str:
    return "DT_" + dtype.name.upper()


class Servable:
    """A SavedModel version loaded for serving.

    Loading also runs every signature once on a small input, so a version
    that cannot answer (corrupt variables, missing ops) is refused at load
    time instead of failing requests. A version exported with an ONNX Runtime
    int8 model (`kbert-export --quantize=int8`) runs the signatures it covers
    with it (`onnxruntime_signatures`), unless `use_onnxruntime` is False.

    Args:
        name: str. Model name.
        version: int. Version number (its directory name).
        path: str. The version directory.
        use_onnxruntime: bool. Run the version's ONNX Runtime model where it has
            one (kbert-serve's `--onnxruntime`). Defaults to True.
        onnxruntime_threads: int. Threads one ONNX Runtime call may use
            (`--onnxruntime_intra_op_parallelism`); 0: ONNX Runtime's choice.

    Example:

    >>> servable = Servable("sst2", 1, "export/sst2/1")
    >>> servable.run("serving_default", {"text": np.array([b"a gorgeous film"], object)})
    """

    def __init__(self, name: str, version: int, path: str, use_onnxruntime: bool = True,
                 onnxruntime_threads: int = 0):
        self.name = name
        self.version = version
        self.path = path
        proto = saved_model_pb2.SavedModel()
        with tf.io.gfile.GFile(os.path.join(path, "saved_model.pb"), "rb") as f:
            proto.ParseFromString(f.read())
        if not proto.meta_graphs:
            raise ValueError(f"{path}/saved_model.pb has no MetaGraph.")
        self.signature_defs = proto.meta_graphs[0].signature_def
        self._loaded = tf.saved_model.load(path)
        self.functions = dict(self._loaded.signatures)
        if not self.functions:
            raise ValueError(f"{path} has no serving signatures.")
        # What kbert's export records of the version ({} for other SavedModels).
        self.export_info = read_export_info(path)
        self.truncation_length = truncation_length(self.export_info)  # None: texts may run in windows
        # The export's tokenizer (`text` -> tokens, offsets), for `POST /tokenize`; None when it has none.
        self.tokenize = getattr(self._loaded, TOKENIZE_FUNCTION, None)
        self.input_specs = {}
        for signature, function in self.functions.items():
            _, kwargs = function.structured_input_signature
            self.input_specs[signature] = dict(kwargs)
        # Signature name -> "onnxruntime" for those its ONNX Runtime model runs.
        self.runtimes = {}
        if use_onnxruntime:
            replaced = onnxruntime_signatures(path, self._loaded, list(self.functions),
                                              onnxruntime_threads)
            self.functions.update(replaced)
            self.runtimes = {signature: "onnxruntime" for signature in replaced}
        self._check_answers()

    def _check_answers(self) -> None:
        # Each signature once on a small input: a version that cannot answer is refused at load.
        for signature, specs in self.input_specs.items():
            inputs = {}
            for input_name, spec in specs.items():
                shape = [1 if dim is None else dim for dim in spec.shape]
                if spec.dtype == tf.string:
                    inputs[input_name] = np.full(shape, b"warm up", dtype=object)
                else:
                    inputs[input_name] = np.ones(shape, spec.dtype.as_numpy_dtype)
            self.run(signature, inputs)

    def signature(self, signature_name: str) -> str:
        """Returns the signature to use, raising INVALID_ARGUMENT if it does not exist."""
        signature_name = signature_name or DEFAULT_SIGNATURE
        if signature_name not in self.functions:
            raise invalid(f'Serving signature name: "{signature_name}" not found in signature def; '
                          f"{self.name} version {self.version} has: {', '.join(sorted(self.functions))}.")
        return signature_name

    def validate(self, signature_name: str, inputs: dict[str, np.ndarray]) -> int:
        """Checks inputs against the signature; returns the batch size.

        Raises:
            ServingError: INVALID_ARGUMENT naming the missing, extra, mistyped
                or misshapen input, or an empty batch.
        """
        specs = self.input_specs[signature_name]
        sent, expected = set(inputs), set(specs)
        if sent != expected:
            raise invalid(
                f"input size does not match signature {signature_name!r}: sent {sorted(sent)}, "
                f"expected {sorted(expected)}. Sent extra: {sorted(sent - expected)}. "
                f"Missing but required: {sorted(expected - sent)}.")
        batch = None
        for input_name, spec in specs.items():
            value = inputs[input_name]
            if spec.dtype == tf.string:
                ok = value.dtype.kind in "OSU"
                sent_dtype = "DT_STRING" if ok else _dtype_name(tf.as_dtype(value.dtype))
            else:
                try:
                    sent_dtype = _dtype_name(tf.as_dtype(value.dtype))
                except TypeError:
                    sent_dtype = "DT_STRING" if value.dtype.kind in "OSU" else str(value.dtype)
                ok = value.dtype == spec.dtype.as_numpy_dtype
            if not ok:
                raise invalid(f"input {input_name!r} has dtype {sent_dtype}; signature "
                              f"{signature_name!r} expects {_dtype_name(spec.dtype)}.")
            if value.ndim != len(spec.shape) or any(
                    want is not None and want != got for want, got in zip(spec.shape, value.shape)):
                wanted = [-1 if dim is None else dim for dim in spec.shape]
                raise invalid(f"input {input_name!r} has shape {list(value.shape)}; signature "
                              f"{signature_name!r} expects {wanted} (-1: any size).")
            if value.shape[0] == 0:
                raise invalid(f"input {input_name!r} has an empty batch (shape {list(value.shape)}); "
                              "send at least one example.")
            if batch is not None and value.shape[0] != batch:
                raise invalid(f"inputs disagree on the batch size: {input_name!r} has {value.shape[0]}, "
                              f"others {batch}.")
            batch = value.shape[0]
        return batch

    def run(self, signature_name: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Runs a signature on validated inputs.

        Raises:
            ServingError: INVALID_ARGUMENT when TensorFlow rejects the values
                (e.g. a token id outside the vocabulary), INTERNAL otherwise.
        """
        function = self.functions[signature_name]
        try:
            outputs = function(**{key: tf.constant(value) for key, value in inputs.items()})
        except tf.errors.InvalidArgumentError as e:
            raise invalid(f"{self.name} version {self.version} signature {signature_name!r} rejected the "
                          f"input values: {op_error_cause(e.message)}") from None
        except tf.errors.OpError as e:
            raise ServingError(grpc.StatusCode.INTERNAL, f"{self.name} version {self.version} signature "
                               f"{signature_name!r} failed: {op_error_cause(e.message)}") from None
        except (ValueError, TypeError) as e:
            raise ServingError(grpc.StatusCode.INTERNAL,
                               f"{self.name} version {self.version} failed: {e}") from None
        return {key: value.numpy() for key, value in outputs.items()}

    def run_tokenize(self, texts: np.ndarray) -> dict[str, np.ndarray]:
        """Runs the export's `tokenize` function (kbert exports have it; see `tokenize`).

        Args:
            texts: object array `[batch]` of UTF-8 bytes.

        Returns:
            dict of `token_ids`, `starts`, `ends`, `texts`, `special` (`[batch,
            tokens]`, padded) and `num_tokens` (`[batch]`), as numpy arrays.

        Raises:
            ServingError: INVALID_ARGUMENT without the function, INTERNAL if it fails.
        """
        if self.tokenize is None:
            raise invalid(f"{self.name} version {self.version} was exported without its tokenizer function; "
                          "re-export it with kbert-export.")
        try:
            outputs = self.tokenize(text=tf.constant(texts, dtype=tf.string))
        except tf.errors.OpError as e:
            raise ServingError(grpc.StatusCode.INTERNAL, f"{self.name} version {self.version} could not "
                               f"tokenize: {op_error_cause(e.message)}") from None
        return {key: value.numpy() for key, value in outputs.items()}

