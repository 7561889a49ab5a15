"""TF Serving's REST API on the standard library's threading HTTP server.

    POST /v1/models/<name>[/versions/<v> | /labels/<l>]:predict
         {"signature_name": "...", "instances": [...]}   -> {"predictions": [...]}
         {"signature_name": "...", "inputs": {...}}      -> {"outputs": {...}}
    GET  /v1/models/<name>[/versions/<v> | /labels/<l>]            model status
    GET  /v1/models/<name>[/versions/<v> | /labels/<l>]/metadata   signature defs

Errors are `{"error": "<message>"}` with HTTP 400 (bad request), 404 (unknown
model or version), 413 (over `--max_request_bytes`) or 5xx. Strings may be sent
as `{"b64": "<base64>"}` (TF Serving's way to send bytes that are not UTF-8).
"""

from __future__ import annotations

import base64
import http.server
import json
import logging
import re

import grpc
import numpy as np
from google.protobuf import json_format

from kbert.serving.errors import ServingError
from kbert.serving.errors import invalid
from kbert.serving.errors import not_found
from kbert.serving.prediction_service import status_response

log = logging.getLogger("kbert.serving")

_PREDICT = re.compile(r"^/v1/models/([^/:]+)(?:/versions/(\d+)|/labels/([^/:]+))?:predict$")
_STATUS = re.compile(r"^/v1/models/([^/:]+)(?:/versions/(\d+)|/labels/([^/:]+))?(/metadata)?$")


def _decode_strings(value, input_name: str):
    """JSON strings (or {"b64": ...}) -> bytes, recursively through lists."""
    if isinstance(value, list):
        return [_decode_strings(item, input_name) for item in value]
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except ValueError:
            raise invalid(f"input {input_name!r}: {value['b64'][:40]!r} is not valid base64.") from None
    raise invalid(f"input {input_name!r} expects strings; got {json.dumps(value)[:60]}.")


def _to_array(value, input_name: str, spec) -> np.ndarray:
    if spec is not None and spec.dtype.name == "string":
        array = np.array(_decode_strings(value, input_name), dtype=object)
        if array.dtype != object or (array.ndim and any(isinstance(v, list) for v in array.flat)):
            raise invalid(f"input {input_name!r} is a ragged list; every row needs the same length.")
        return array
    dtype = spec.dtype.as_numpy_dtype if spec is not None else None
    try:
        return np.array(value, dtype=dtype)
    except (ValueError, TypeError) as e:
        wanted = spec.dtype.name if spec is not None else "numbers"
        raise invalid(f"input {input_name!r} expects {wanted} values of one shape; got "
                      f"{json.dumps(value)[:60]} ({e}).") from None


def _to_json(value: np.ndarray):
    if value.dtype == object or value.dtype.kind == "S":
        return np.vectorize(lambda b: b.decode("utf-8", "replace") if isinstance(b, bytes) else b,
                            otypes=[object])(value).tolist() if value.size else value.tolist()
    return value.tolist()


def parse_predict_body(body: bytes, specs: dict) -> tuple[dict, str]:
    """Turns a REST predict body into input arrays; returns `(inputs, "row" | "columnar")`.

    Args:
        body: bytes. The request body.
        specs: dict of input name to `tf.TensorSpec` of the chosen signature.
    """
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object with 'instances' or 'inputs'.")
    names = sorted(specs)
    if ("instances" in body) == ("inputs" in body):
        raise invalid("Send exactly one of 'instances' (row format) or 'inputs' (columnar format).")
    extra = sorted(set(body) - {"instances", "inputs", "signature_name"})
    if extra:
        raise invalid(f"Unknown key(s) {extra} in the request; expected signature_name and "
                      "instances or inputs.")
    if "instances" in body:
        instances = body["instances"]
        if not isinstance(instances, list) or not instances:
            raise invalid("'instances' must be a non-empty list (one item per example).")
        columns: dict = {name: [] for name in names}
        for index, instance in enumerate(instances):
            if not _named(instance):
                if len(names) != 1:
                    raise invalid(f"instance {index} must be an object with keys {names}.")
                instance = {names[0]: instance}
            if set(instance) != set(names):
                raise invalid(f"instance {index} has keys {sorted(instance)}; the signature takes {names}. "
                              f"Missing: {sorted(set(names) - set(instance))}; extra: "
                              f"{sorted(set(instance) - set(names))}.")
            for name in names:
                columns[name].append(instance[name])
        return {name: _to_array(columns[name], name, specs[name]) for name in names}, "row"
    inputs = body["inputs"]
    if not _named(inputs):
        if len(names) != 1:
            raise invalid(f"'inputs' must be an object with keys {names}.")
        inputs = {names[0]: inputs}
    return {name: _to_array(value, name, specs.get(name)) for name, value in inputs.items()}, "columnar"


def _named(value) -> bool:
    """Whether a JSON value maps input names to values (rather than being one b64 string)."""
    return isinstance(value, dict) and set(value) != {"b64"}


def format_predict_response(outputs: dict, form: str) -> dict:
    """Builds `{"predictions": ...}` (row) or `{"outputs": ...}` (columnar) as TF Serving does."""
    converted = {name: _to_json(value) for name, value in outputs.items()}
    if form == "columnar":
        return {"outputs": next(iter(converted.values())) if len(converted) == 1 else converted}
    if len(converted) == 1:
        return {"predictions": next(iter(converted.values()))}
    rows = len(next(iter(converted.values())))
    return {"predictions": [{name: value[i] for name, value in converted.items()} for i in range(rows)]}


class RestHandler(http.server.BaseHTTPRequestHandler):
    """Request handler; the server object carries `predictor`, `manager` and `max_request_bytes`."""

    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse connections
    server_version = "kbert-serve"

    def log_message(self, format, *args):  # noqa: A002  (the base class's name)
        log.debug("REST %s", format % args)

    def _send(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, error: ServingError) -> None:
        self._send(error.http_status, {"error": error.message})

    def do_GET(self):  # noqa: N802  (http.server's naming)
        try:
            match = _STATUS.match(self.path.split("?")[0])
            if not match:
                raise not_found(f"Malformed request: GET {self.path}; try /v1/models/<name> or "
                                "/v1/models/<name>/metadata.")
            name, version, label, metadata = match.groups()
            version = int(version) if version else None
            manager = self.server.manager
            if metadata:
                servable, signature_map = self.server.predictor.metadata(name, version, label)
                self._send(200, {
                    "model_spec": {"name": servable.name, "signature_name": "",
                                   "version": str(servable.version)},
                    "metadata": {"signature_def": json_format.MessageToDict(
                        signature_map, preserving_proto_field_name=True)},
                })
                return
            if label:
                version = manager.get(name, label=label).version
            response = status_response(manager.status(name, version))
            payload = {"model_version_status": [
                {"version": str(entry.version),
                 "state": type(entry).State.Name(entry.state),
                 "status": {"error_code": _code_name(entry.status.error_code),
                            "error_message": entry.status.error_message}}
                for entry in response.model_version_status]}
            self._send(200, payload)
        except ServingError as e:
            self._error(e)

    def do_POST(self):  # noqa: N802
        try:
            length = self.headers.get("Content-Length")
            if length is None:
                self.close_connection = True
                raise invalid("The request needs a Content-Length header.")
            length = int(length)
            if length > self.server.max_request_bytes:
                self.close_connection = True  # the unread body must not be taken as the next request
                raise ServingError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                   f"Request of {length} bytes is over --max_request_bytes="
                                   f"{self.server.max_request_bytes}.")
            raw = self.rfile.read(length)
            match = _PREDICT.match(self.path)
            if not match:
                raise not_found(f"Malformed request: POST {self.path}; predict at "
                                "/v1/models/<name>[/versions/<v>]:predict.")
            name, version, label = match.groups()
            version = int(version) if version else None
            try:
                body = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise invalid(f"Malformed JSON request body: {e}") from None
            signature_name = body.get("signature_name", "") if isinstance(body, dict) else ""
            if not isinstance(signature_name, str):
                raise invalid("'signature_name' must be a string.")
            servable = self.server.manager.get(name, version, label)
            signature = servable.signature(signature_name)
            inputs, form = parse_predict_body(body, servable.input_specs[signature])
            _, _, outputs = self.server.predictor.predict(name, version, label, signature, inputs,
                                                          servable=servable)
            self._send(200, format_predict_response(outputs, form))
        except ServingError as e:
            self._error(e)


def _code_name(code: int) -> str:
    for status in grpc.StatusCode:
        if status.value[0] == code:
            return status.name
    return str(code)


class RestServer(http.server.ThreadingHTTPServer):
    """A threading HTTP server carrying what `RestHandler` needs.

    Args:
        address: `(host, port)`.
        predictor: `Predictor`.
        manager: `ModelManager`.
        max_request_bytes: int. Larger bodies get HTTP 413.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, predictor, manager, max_request_bytes: int):
        self.predictor = predictor
        self.manager = manager
        self.max_request_bytes = max_request_bytes
        super().__init__(address, RestHandler)
