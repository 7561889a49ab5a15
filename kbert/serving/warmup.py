"""SavedModel warm-up: the requests in `assets.extra/tf_serving_warmup_requests`, replayed at load.

TF Serving's format (`tensorflow_serving/servables/tensorflow/saved_model_warmup.md`):
a TFRecord file of `PredictionLog` protos, each holding one request
(`predict_log`, `classify_log`, `regress_log` or `multi_inference_log`), at
most 1,000 of them. With `--enable_model_warmup` (on by default, as in TF
Serving) the server replays each `--num_request_iterations_for_warmup` times
on a version it has just loaded, before the version is marked available, so the
first real request does not pay for work TensorFlow and ONNX Runtime do on a
function's first calls (graph optimization, kernel and memory set-up for the
shapes seen). A record that fails fails the load, as in TF Serving. A version
without the file loads as before. `kbert-export` writes one Predict request per
signature that takes text, with a short and a long text
(`kbert.export.saved_model`).
"""

from __future__ import annotations

import logging
import os

import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from kbert.serving.example_apis import proto_examples
from kbert.serving.example_apis import text_inputs
from kbert.serving.limits import Limits

log = logging.getLogger("kbert.serving")

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
# TF Serving's WarmupConsts::kMaxNumRecords.
MAX_RECORDS = 1000


def read_warmup_requests(version_dir: str) -> list[prediction_log_pb2.PredictionLog]:
    """The warm-up records of a version directory, `[]` when it has none.

    Args:
        version_dir: str. A SavedModel version directory.

    Returns:
        list of `PredictionLog`.

    Raises:
        ValueError: a record that is not a `PredictionLog`, or more than 1,000.

    Example:

    >>> [log.predict_log.request.model_spec.signature_name for log in read_warmup_requests("export/sst2/1")]
    ['serving_default']
    """
    path = os.path.join(version_dir, WARMUP_FILE)
    if not tf.io.gfile.exists(path):
        return []
    records = []
    for index, raw in enumerate(tf.data.TFRecordDataset(path).as_numpy_iterator()):
        if index >= MAX_RECORDS:
            raise ValueError(f"{path} holds more than {MAX_RECORDS} warm-up records (TF Serving's limit).")
        record = prediction_log_pb2.PredictionLog()
        try:
            record.ParseFromString(raw)
        except Exception as e:  # protobuf's DecodeError
            raise ValueError(f"{path}: record {index} is not a PredictionLog: {e}") from None
        records.append(record)
    return records


def replay_warmup(servable, iterations: int) -> int:
    """Runs a loaded version's warm-up requests, each `iterations` times.

    Args:
        servable: `Servable`, loaded and not yet serving.
        iterations: int. Times each record runs; 0 runs none.

    Returns:
        int. The records replayed.

    Raises:
        ValueError or `ServingError`: a record the version cannot answer.

    Example:

    >>> replay_warmup(Servable("sst2", 1, "export/sst2/1"), iterations=1)
    1
    """
    if iterations <= 0:
        return 0
    records = read_warmup_requests(servable.path)
    for index, record in enumerate(records):
        calls = _calls(servable, record, index)
        for _ in range(iterations):
            for signature, inputs in calls:
                servable.validate(signature, inputs)
                servable.run(signature, inputs)
    return len(records)


def _calls(servable, record: prediction_log_pb2.PredictionLog, index: int) -> list[tuple[str, dict]]:
    """The `(signature, inputs)` runs a record asks for."""
    kind = record.WhichOneof("log_type")
    if kind == "predict_log":
        request = record.predict_log.request
        return [(servable.signature(request.model_spec.signature_name),
                 {key: tf.make_ndarray(value) for key, value in request.inputs.items()})]
    if kind in ("classify_log", "regress_log"):
        request = getattr(record, kind).request
        return [_example_call(servable, request.model_spec.signature_name, request.input)]
    if kind == "multi_inference_log":
        request = record.multi_inference_log.request
        return [_example_call(servable, task.model_spec.signature_name, request.input)
                for task in request.tasks]
    raise ValueError(f"{servable.path}/{WARMUP_FILE}: record {index} is a {kind or 'empty'} log; warm-up "
                     "replays predict, classify, regress and multi_inference logs.")


def _example_call(servable, signature_name: str, proto) -> tuple[str, dict]:
    signature = servable.signature(signature_name)
    examples, context = proto_examples(proto, Limits())
    return signature, text_inputs(servable, signature, examples, context)
