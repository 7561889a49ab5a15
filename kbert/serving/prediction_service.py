"""TF Serving's gRPC services: `PredictionService` (Predict, GetModelMetadata) and `ModelService`.

Messages are the `tensorflow-serving-api` protos, so any TF Serving client
(`prediction_service_pb2_grpc.PredictionServiceStub`) talks to kbert-serve.
Classify, Regress and MultiInference read raw text from tf.Examples' bytes
features (`kbert.serving.example_apis`). Every call is counted and timed in the
server's metrics.
"""

from __future__ import annotations

import time

import grpc
import tensorflow as tf
from google.protobuf import any_pb2
from tensorflow_serving.apis import get_model_metadata_pb2
from tensorflow_serving.apis import get_model_status_pb2
from tensorflow_serving.apis import model_management_pb2
from tensorflow_serving.apis import model_service_pb2_grpc
from tensorflow_serving.apis import predict_pb2
from tensorflow_serving.apis import prediction_service_pb2_grpc

from kbert.serving.errors import ServingError
from kbert.serving.errors import invalid
from kbert.serving.example_apis import ExampleApis
from kbert.serving.limits import ByteBudget
from kbert.serving.limits import Limits
from kbert.serving.limits import RequestSlots
from kbert.serving.limits import check_deadline
from kbert.serving.model_manager import ModelManager
from kbert.serving.predictor import Predictor


def _version_request(model_spec):
    version = model_spec.version.value if model_spec.HasField("version") else None
    return model_spec.name, version, model_spec.version_label or None


def _to_arrays(inputs, limits: Limits) -> dict:
    arrays = {}
    for key, proto in inputs.items():
        if proto.tensor_shape.dim:  # refuse a huge batch before decoding it
            limits.check_batch(key, proto.tensor_shape.dim[0].size)
        try:
            arrays[key] = tf.make_ndarray(proto)
        except Exception as e:  # a TensorProto whose content does not match its shape or dtype
            raise invalid(f"input {key!r} is not a valid TensorProto: {e}") from None
    return arrays


def _abort(context, error: ServingError):
    context.abort(error.code, error.message)


def _deadline(context) -> float | None:
    """The client's deadline as a `time.monotonic()` instant, or None if it set none."""
    remaining = context.time_remaining()
    if remaining is None or remaining > 1e8:  # grpcio reports "no deadline" as a far-off one
        return None
    return time.monotonic() + remaining


class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer):
    """`tensorflow.serving.PredictionService` over a `Predictor`.

    Args:
        predictor: `Predictor`.
        budget: `ByteBudget` or None. Bytes that all requests in flight may
            hold (shared with REST); None sets no such cap.
        slots: `RequestSlots` or None. Requests in flight at once (shared
            with REST); None sets no such cap.
    """

    def __init__(self, predictor: Predictor, budget: ByteBudget | None = None,
                 slots: RequestSlots | None = None):
        self.predictor = predictor
        self.budget = budget
        self.slots = slots
        self.examples = ExampleApis(predictor)

    def _serve(self, api: str, request, context, answer):
        """Runs `answer(deadline, record)` under the deadline, the byte budget and the metrics."""
        deadline = _deadline(context)
        held, slot = 0, False
        with self.predictor.metrics.request(api, "grpc") as record:
            try:
                if self.slots is not None:  # first: a refusal must cost nothing
                    self.slots.take()
                    slot = True
                # A request that waited for a thread past its client's deadline is not run at all.
                check_deadline(deadline, "a thread was free to read it")
                if not context.is_active():
                    raise ServingError(grpc.StatusCode.CANCELLED, "The client cancelled the request.")
                if self.budget is not None:
                    size = request.ByteSize()
                    self.budget.take(size)
                    held = size
                return answer(deadline, record)
            except ServingError as e:
                error = e
                record.status = e.code.name
            finally:
                if held:
                    self.budget.give(held)
                if slot:
                    self.slots.give()
        _abort(context, error)  # outside the record: grpc's abort raises an exception of its own

    def Predict(self, request: predict_pb2.PredictRequest, context) -> predict_pb2.PredictResponse:
        def answer(deadline, record):
            name, version, label = _version_request(request.model_spec)
            servable, signature, outputs = self.predictor.predict(
                name, version, label, request.model_spec.signature_name,
                _to_arrays(request.inputs, self.predictor.limits), list(request.output_filter),
                deadline=deadline, record=record)
            response = predict_pb2.PredictResponse()
            response.model_spec.name = servable.name
            response.model_spec.version.value = servable.version
            response.model_spec.signature_name = signature
            for key, value in outputs.items():
                response.outputs[key].CopyFrom(tf.make_tensor_proto(value))
            return response

        return self._serve("predict", request, context, answer)

    def Classify(self, request, context):
        """tf.Examples' `text` (+ `text_pair`) -> every class's label and probability, as Predict gives them."""
        return self._serve("classify", request, context,
                           lambda deadline, record: self.examples.classify(request, deadline, record))

    def Regress(self, request, context):
        """tf.Examples' text features -> the model's `score`, as Predict gives it."""
        return self._serve("regress", request, context,
                           lambda deadline, record: self.examples.regress(request, deadline, record))

    def MultiInference(self, request, context):
        """Classify and Regress tasks over one input (all on one model, as TF Serving requires)."""
        return self._serve("multi_inference", request, context,
                           lambda deadline, record: self.examples.multi_inference(request, deadline, record))

    def GetModelMetadata(self, request, context):
        def answer(deadline, record):
            fields = list(request.metadata_field)
            if fields != ["signature_def"]:
                raise invalid(f"metadata_field must be ['signature_def'], got {fields}.")
            name, version, label = _version_request(request.model_spec)
            servable, signature_map = self.predictor.metadata(name, version, label)
            record.servable(servable, "")
            response = get_model_metadata_pb2.GetModelMetadataResponse()
            response.model_spec.name = servable.name
            response.model_spec.version.value = servable.version
            packed = any_pb2.Any()
            packed.Pack(signature_map)
            response.metadata["signature_def"].CopyFrom(packed)
            return response

        return self._serve("get_model_metadata", request, context, answer)


class ModelServicer(model_service_pb2_grpc.ModelServiceServicer):
    """`tensorflow.serving.ModelService`: GetModelStatus and HandleReloadConfigRequest.

    Args:
        manager: `ModelManager`.
        reloader: `ConfigReloader` or None. Applies reload requests; None
            answers them UNIMPLEMENTED.
    """

    def __init__(self, manager: ModelManager, reloader=None):
        self.manager = manager
        self.reloader = reloader

    def GetModelStatus(self, request, context):
        name, version, label = _version_request(request.model_spec)
        try:
            if label:
                version = self.manager.get(name, label=label).version
            statuses = self.manager.status(name, version)
        except ServingError as e:
            _abort(context, e)
        return status_response(statuses)

    def HandleReloadConfigRequest(self, request, context):
        """Serves the request's `ModelServerConfig` from now on (`ConfigReloader.reload`).

        As in TF Serving, the answer comes once new models have loaded, an
        error is both the call's status and the response's `status`, and each
        of `metric_names` is answered (with an increase of 0: kbert-serve's
        metrics are Prometheus', at `/monitoring/prometheus/metrics`).
        """
        if self.reloader is None:
            _abort(context, ServingError(grpc.StatusCode.UNIMPLEMENTED, "This server takes no reload requests."))
        try:
            self.reloader.reload(request.config)
        except ServingError as e:
            _abort(context, e)
        response = model_management_pb2.ReloadConfigResponse()
        response.status.error_code = 0
        for name in request.metric_names:
            response.metric.add(name=name, int64_value_increase=0)
        return response


def status_response(statuses) -> get_model_status_pb2.GetModelStatusResponse:
    """Builds a `GetModelStatusResponse` from `VersionStatus` records."""
    response = get_model_status_pb2.GetModelStatusResponse()
    for status in statuses:
        entry = response.model_version_status.add()
        entry.version = status.version
        entry.state = get_model_status_pb2.ModelVersionStatus.State.Value(status.state)
        entry.status.error_code = grpc.StatusCode[status.error_code].value[0]
        entry.status.error_message = status.error_message
    return response
