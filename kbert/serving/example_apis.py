"""TF Serving's tf.Example APIs over kbert's raw-text signatures: Classify, Regress, MultiInference.

A TF Serving client sends `tf.train.Example`s (gRPC `ClassificationRequest`,
`RegressionRequest`, `MultiInferenceRequest`, or REST `:classify` /
`:regress` with `{"examples": [...], "context": {...}}`). kbert signatures
take strings, so each input of the chosen signature (`serving_default` unless
`signature_name` says otherwise) is read from the bytes feature of the same
name: `text` (and `text_pair`) for classifiers and regressors, `query` and
`document` for re-rankers. A feature missing from an example is taken from the
context, as TF Serving merges context features into every example. The
signature then runs through Predict's path (limits, batching, deadline), so
the answers are Predict's:

| API | reads | answers |
|---|---|---|
| Classify | `probabilities` `[b, k]` (or TF Serving's `scores` + `classes`) | per example, `(label, probability)` of every class |
| Regress | `score` `[b]` (or TF Serving's `outputs`) | per example, the score |
| MultiInference | the tasks above on one input | one result per task |

Classes come in the model's order, named as `assets.extra/kbert_export.json` records
(`"0"`, `"1"`, ... when it names none).
"""

from __future__ import annotations

import base64
import json
import os
import threading
import weakref

import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import classification_pb2
from tensorflow_serving.apis import inference_pb2
from tensorflow_serving.apis import input_pb2
from tensorflow_serving.apis import regression_pb2

from kbert.serving.errors import invalid

CLASSIFY = "tensorflow/serving/classify"
REGRESS = "tensorflow/serving/regress"
_API = {CLASSIFY: "classify", REGRESS: "regress"}

_label_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # Servable -> its label names
_label_lock = threading.Lock()


def proto_examples(proto: input_pb2.Input, limits) -> tuple[list[dict], dict]:
    """The examples and context of a gRPC `Input`, as feature dicts.

    Args:
        proto: `tensorflow_serving.apis.input_pb2.Input`.
        limits: `Limits`. The number of examples is checked before any is read.

    Returns:
        `(examples, context)`: each a dict of feature name -> `tf.train.Feature`.
    """
    kind = proto.WhichOneof("kind")
    if kind == "example_list":
        examples, context = proto.example_list.examples, None
    elif kind == "example_list_with_context":
        examples, context = proto.example_list_with_context.examples, proto.example_list_with_context.context
    else:
        raise invalid("Input is empty: set input.example_list (or example_list_with_context) to tf.Examples "
                      "with a bytes feature per signature input (e.g. 'text').")
    limits.check_batch("examples", len(examples))
    return ([dict(example.features.feature) for example in examples],
            dict(context.features.feature) if context is not None else {})


def json_examples(body, limits) -> tuple[list[dict], dict, str]:
    """The examples, context and signature of a REST `:classify` / `:regress` body.

    Args:
        body: the parsed JSON: `{"signature_name", "context", "examples"}`.
        limits: `Limits`.

    Returns:
        `(examples, context, signature_name)`; features are JSON values.
    """
    if not isinstance(body, dict):
        raise invalid('The request body must be a JSON object {"examples": [{"text": "..."}], '
                      '"context": {...}, "signature_name": "..."}.')
    extra = sorted(set(body) - {"examples", "context", "signature_name"})
    if extra:
        raise invalid(f"Unknown key(s) {extra} in the request; expected signature_name, context and examples.")
    examples, context = body.get("examples"), body.get("context", {})
    signature_name = body.get("signature_name", "")
    if not isinstance(signature_name, str):
        raise invalid("'signature_name' must be a string.")
    if not isinstance(examples, list) or not examples:
        raise invalid("'examples' must be a non-empty list of objects, one per example "
                      '(e.g. [{"text": "a gorgeous film"}]).')
    limits.check_batch("examples", len(examples))
    if not isinstance(context, dict):
        raise invalid("'context' must be an object of feature name -> value.")
    for index, example in enumerate(examples):
        if not isinstance(example, dict):
            raise invalid(f"example {index} must be an object of feature name -> value; got "
                          f"{json.dumps(example)[:60]}.")
    return examples, context, signature_name


def _proto_bytes(feature: tf.train.Feature, name: str, where: str) -> bytes:
    kind = feature.WhichOneof("kind")
    if kind != "bytes_list":
        raise invalid(f"feature {name!r} of {where} is a {kind or 'empty feature'}; kbert models read text "
                      "from a bytes_list feature.")
    if len(feature.bytes_list.value) != 1:
        raise invalid(f"feature {name!r} of {where} has {len(feature.bytes_list.value)} values; send exactly one "
                      "string.")
    return feature.bytes_list.value[0]


def json_string_bytes(value, what: str, expected: str = "expects strings") -> bytes:
    """TF Serving's JSON form of one string: text, or `{"b64": ...}` for raw bytes.

    Args:
        value: a decoded JSON value.
        what: str. What it is, for errors ("input 'text'").
        expected: str. What the error says `what` takes.

    Returns:
        bytes.

    Raises:
        ServingError: INVALID_ARGUMENT naming `what`.
    """
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except ValueError:
            raise invalid(f"{what}: {value['b64'][:40]!r} is not valid base64.") from None
    raise invalid(f"{what} {expected}; got {json.dumps(value)[:60]}.")


def _json_bytes(value, name: str, where: str) -> bytes:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    return json_string_bytes(value, f"feature {name!r} of {where}",
                             'must be one string (or {"b64": ...})')


def text_inputs(servable, signature: str, examples: list[dict], context: dict,
                from_json: bool = False) -> dict[str, np.ndarray]:
    """Reads each string input of a signature from the examples' features of the same name.

    Args:
        servable: `Servable`.
        signature: str. Signature name (already checked to exist).
        examples: list of feature dicts (`proto_examples` or `json_examples`).
        context: feature dict shared by every example.
        from_json: bool. Features are JSON values (REST), not `tf.train.Feature`s.

    Returns:
        Dict of input name -> object array of bytes, `[len(examples)]`.

    Raises:
        ServingError: INVALID_ARGUMENT naming the example and feature at fault,
            or a signature whose inputs are not `[batch]` strings.
    """
    specs = servable.input_specs[signature]
    if any(spec.dtype != tf.string or len(spec.shape) != 1 for spec in specs.values()):
        raise invalid(f"signature {signature!r} of {servable.name} takes {_describe(specs)}; tf.Example APIs "
                      "read [batch] string inputs from bytes features. Use Predict.")
    if not examples:
        raise invalid("Input is empty: send at least one example.")
    read = _json_bytes if from_json else _proto_bytes
    inputs = {}
    for name in specs:
        column = []
        for index, example in enumerate(examples):
            if name in example:
                column.append(read(example[name], name, f"example {index}"))
            elif name in context:
                column.append(read(context[name], name, "the context"))
            else:
                raise invalid(f"example {index} has no feature {name!r}; signature {signature!r} of "
                              f"{servable.name} reads {sorted(specs)} (bytes features, or in the context).")
        inputs[name] = np.array(column, dtype=object)
    return inputs


def _describe(specs: dict) -> str:
    return ", ".join(f"{name} ({spec.dtype.name} {[-1 if d is None else d for d in spec.shape]})"
                     for name, spec in sorted(specs.items()))


def label_names(servable, num_classes: int) -> list[str]:
    """The class names of a kbert classifier, in logit order (`"0", "1", ...` when none are recorded)."""
    with _label_lock:
        names = _label_cache.get(servable)
    if names is None:
        names = []
        path = os.path.join(servable.path, "assets.extra", "kbert_export.json")
        try:
            with tf.io.gfile.GFile(path) as f:
                names = list(json.load(f).get("task_config", {}).get("label_names") or [])
        except (tf.errors.OpError, ValueError, AttributeError):
            names = []
        with _label_lock:
            _label_cache[servable] = names
    if len(names) != num_classes:
        return [str(i) for i in range(num_classes)]
    return names


def classifications(servable, signature: str, outputs: dict) -> list[list[tuple[str, float]]]:
    """Per example, `(label, score)` of every class, from a signature's outputs."""
    if "scores" in outputs:  # TF Serving's classification outputs
        scores = np.asarray(outputs["scores"])
        classes = outputs.get("classes")
        labels = (np.vectorize(lambda b: b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b),
                               otypes=[object])(classes) if classes is not None
                  else np.full(scores.shape, "", dtype=object))
    elif "probabilities" in outputs:
        scores = np.asarray(outputs["probabilities"])
        labels = np.broadcast_to(np.array(label_names(servable, scores.shape[-1]), dtype=object), scores.shape)
    else:
        raise invalid(f"signature {signature!r} of {servable.name} gives {sorted(outputs)}; Classify needs "
                      "'probabilities' (a kbert classifier) or 'scores'. Use Regress for a score, or Predict.")
    if scores.ndim != 2:
        raise invalid(f"signature {signature!r} of {servable.name} gives scores of shape {list(scores.shape)}; "
                      "Classify needs [batch, classes].")
    return [[(str(label), float(score)) for label, score in zip(row_labels, row)]
            for row_labels, row in zip(labels, scores)]


def regressions(servable, signature: str, outputs: dict) -> list[float]:
    """Per example, the regressed value, from a signature's outputs."""
    key = "score" if "score" in outputs else "outputs" if "outputs" in outputs else None
    if key is None:
        raise invalid(f"signature {signature!r} of {servable.name} gives {sorted(outputs)}; Regress needs "
                      "'score' (a kbert regressor or re-ranker) or 'outputs'. Use Classify for a classifier.")
    values = np.asarray(outputs[key])
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.ndim != 1:
        raise invalid(f"signature {signature!r} of {servable.name} gives {key!r} of shape {list(values.shape)}; "
                      "Regress needs one value per example.")
    return [float(value) for value in values]


def classification_result(rows: list[list[tuple[str, float]]]) -> classification_pb2.ClassificationResult:
    result = classification_pb2.ClassificationResult()
    for row in rows:
        entry = result.classifications.add()
        for label, score in row:
            entry.classes.add(label=label, score=score)
    return result


def regression_result(values: list[float]) -> regression_pb2.RegressionResult:
    result = regression_pb2.RegressionResult()
    for value in values:
        result.regressions.add(value=value)
    return result


class ExampleApis:
    """Classify, Regress and MultiInference over a `Predictor`, for gRPC and REST.

    Args:
        predictor: `Predictor`.

    Example:

    >>> apis = ExampleApis(predictor)
    >>> response = apis.classify(request, deadline=None, record=record)   # ClassificationRequest
    >>> apis.rest("classify", "sst2", None, None, {"examples": [{"text": "a gorgeous film"}]})
    {'result': [[['negative', 0.1], ['positive', 0.9]]]}
    """

    def __init__(self, predictor):
        self.predictor = predictor

    def _run(self, method: str, name: str, version, label, signature_name: str, examples, context,
             deadline, record, from_json: bool = False):
        servable = self.predictor.manager.get(name, version, label)
        signature = servable.signature(signature_name)
        if record is not None:
            record.servable(servable, signature)
        inputs = text_inputs(servable, signature, examples, context, from_json)
        _, _, outputs = self.predictor.predict(name, version, label, signature, inputs, servable=servable,
                                               deadline=deadline, record=record)
        if method == CLASSIFY:
            return servable, signature, classifications(servable, signature, outputs)
        return servable, signature, regressions(servable, signature, outputs)

    def classify(self, request, deadline=None, record=None) -> classification_pb2.ClassificationResponse:
        """Answers a gRPC `ClassificationRequest`."""
        examples, context = proto_examples(request.input, self.predictor.limits)
        servable, signature, rows = self._run(CLASSIFY, *_spec(request.model_spec), examples, context,
                                              deadline, record)
        response = classification_pb2.ClassificationResponse()
        _fill_spec(response.model_spec, servable, signature)
        response.result.CopyFrom(classification_result(rows))
        return response

    def regress(self, request, deadline=None, record=None) -> regression_pb2.RegressionResponse:
        """Answers a gRPC `RegressionRequest`."""
        examples, context = proto_examples(request.input, self.predictor.limits)
        servable, signature, values = self._run(REGRESS, *_spec(request.model_spec), examples, context,
                                                deadline, record)
        response = regression_pb2.RegressionResponse()
        _fill_spec(response.model_spec, servable, signature)
        response.result.CopyFrom(regression_result(values))
        return response

    def multi_inference(self, request, deadline=None, record=None) -> inference_pb2.MultiInferenceResponse:
        """Answers a gRPC `MultiInferenceRequest`: Classify and Regress tasks on one model and input."""
        if not request.tasks:
            raise invalid("MultiInferenceRequest has no tasks; add tasks with method_name "
                          f"{CLASSIFY!r} or {REGRESS!r}.")
        names = {task.model_spec.name for task in request.tasks}
        if len(names) > 1:
            raise invalid(f"All tasks of a MultiInferenceRequest must name the same model (as in TF Serving); "
                          f"got {sorted(names)}.")
        signatures = [task.model_spec.signature_name or "serving_default" for task in request.tasks]
        if len(set(signatures)) != len(signatures):
            raise invalid(f"Duplicate signature_name in a MultiInferenceRequest's tasks: {signatures}; each task "
                          "names a different signature (as in TF Serving).")
        for task in request.tasks:
            if task.method_name not in _API:
                raise invalid(f"Unsupported method_name {task.method_name!r} in a MultiInferenceRequest task; "
                              f"kbert-serve answers {CLASSIFY!r} and {REGRESS!r}.")
        examples, context = proto_examples(request.input, self.predictor.limits)
        response = inference_pb2.MultiInferenceResponse()
        for task in request.tasks:
            servable, signature, answer = self._run(task.method_name, *_spec(task.model_spec), examples, context,
                                                    deadline, record)
            result = response.results.add()
            _fill_spec(result.model_spec, servable, signature)
            if task.method_name == CLASSIFY:
                result.classification_result.CopyFrom(classification_result(answer))
            else:
                result.regression_result.CopyFrom(regression_result(answer))
        return response

    def rest(self, method: str, name: str, version, label, body, deadline=None, record=None) -> dict:
        """Answers REST `:classify` (`{"result": [[[label, score], ...], ...]}`) or `:regress` (`{"result": [...]}`)."""
        examples, context, signature_name = json_examples(body, self.predictor.limits)
        method = CLASSIFY if method == "classify" else REGRESS
        _, _, answer = self._run(method, name, version, label, signature_name, examples, context, deadline, record,
                                 from_json=True)
        if method == CLASSIFY:
            return {"result": [[[label_, score] for label_, score in row] for row in answer]}
        return {"result": answer}


def _spec(model_spec):
    version = model_spec.version.value if model_spec.HasField("version") else None
    return model_spec.name, version, model_spec.version_label or None, model_spec.signature_name


def _fill_spec(spec, servable, signature: str) -> None:
    spec.name = servable.name
    spec.version.value = servable.version
    spec.signature_name = signature
