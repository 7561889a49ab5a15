"""TF Serving's REST API, apart from the HTTP server that carries it (`rest_server.py`).

    POST /v1/models/<name>[/versions/<v> | /labels/<l>]:predict
         {"signature_name": "...", "instances": [...]}   -> {"predictions": [...]}
         {"signature_name": "...", "inputs": {...}}      -> {"outputs": {...}}
    POST /v1/models/<name>[/versions/<v> | /labels/<l>]:classify | :regress
         {"signature_name": "...", "context": {...}, "examples": [{"text": "..."}, ...]}
                                   -> {"result": [[[label, score], ...], ...]} | {"result": [value, ...]}
    POST /v1/embeddings            OpenAI's embeddings API (kbert.serving.encoder_apis)
    GET  /v1/models                OpenAI's model list (kbert.serving.encoder_apis)
    POST /embed, /predict, /rerank, /tokenize; GET /info, /health
                                   TEI's API (kbert.serving.tei_apis)
    GET  /monitoring/prometheus/metrics   Prometheus text exposition (kbert.serving.metrics)
    GET  /v1/models/<name>[/versions/<v> | /labels/<l>]            model status (and, for
                                   /v1/models/<name>, OpenAI's model object in the same JSON)
    GET  /v1/models/<name>[/versions/<v> | /labels/<l>]/metadata   signature defs
    POST /v1/indexes/<name>:search {"queries": [...], "top_k": 10}
                                   -> {"ids": [[...]], "scores": [[...]], "texts": [[...]]}
    GET  /v1/indexes/<name>        the index's metadata (kbert-serve --index_dir)

POST paths are one table (`POST_ROUTES`: the path, the `api` label the
metrics count it under, the handler, the error shape). Errors are
`{"error": "<message>"}` (OpenAI's and TEI's shapes on their paths,
`error_body`) with HTTP 400 (bad request, malformed or
over-deep JSON, a limit passed), 401 (no `--api_key` bearer token), 404
(unknown model or version), 413 (over
`--max_request_bytes`), 503 (busy: retry) or 504 (deadline passed). Strings may
be sent as `{"b64": "<base64>"}` (TF Serving's way to send bytes that are not
UTF-8).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import sys
from typing import Callable

import grpc
import numpy as np
from google.protobuf import json_format

from kbert.serving.encoder_apis import EMBEDDINGS_PATH
from kbert.serving.encoder_apis import MODELS_PATH
from kbert.serving.encoder_apis import EncoderApis
from kbert.serving.encoder_apis import openai_error
from kbert.serving.encoder_apis import tei_error
from kbert.serving.errors import ServingError
from kbert.serving.errors import invalid
from kbert.serving.errors import not_found
from kbert.serving.example_apis import ExampleApis
from kbert.serving.example_apis import json_string_bytes
from kbert.serving.limits import Limits
from kbert.serving.limits import check_deadline
from kbert.serving.metrics import CONTENT_TYPE
from kbert.serving.metrics import METRICS_PATH
from kbert.serving.metrics import status_of_http
from kbert.serving.prediction_service import status_response
from kbert.serving.tei_apis import EMBED_PATH
from kbert.serving.tei_apis import HEALTH_PATH
from kbert.serving.tei_apis import INFO_PATH
from kbert.serving.tei_apis import PREDICT_PATH
from kbert.serving.tei_apis import RERANK_PATH
from kbert.serving.tei_apis import TOKENIZE_PATH
from kbert.serving.tei_apis import TeiApis

log = logging.getLogger("kbert.serving")

_PREDICT = re.compile(r"^/v1/models/([^/:]+)(?:/versions/(\d+)|/labels/([^/:]+))?:"
                      r"(?P<method>predict|classify|regress)$")
_SEARCH = re.compile(r"^/v1/indexes/([^/:]+):search$")
_INDEX = re.compile(r"^/v1/indexes/([^/:]+)$")
_STATUS = re.compile(r"^/v1/models/([^/:]+)(?:/versions/(\d+)|/labels/([^/:]+))?(/metadata)?$")


def _decode_strings(value, input_name: str):
    """JSON strings (or {"b64": ...}) -> bytes, recursively through lists."""
    if isinstance(value, list):
        return [_decode_strings(item, input_name) for item in value]
    return json_string_bytes(value, f"input {input_name!r}")


def _to_array(value, input_name: str, spec) -> np.ndarray:
    if spec is not None and spec.dtype.name == "string":
        array = np.array(_decode_strings(value, input_name), dtype=object)
        if array.ndim > len(spec.shape):  # before .flat, which numpy limits to 32 dimensions
            raise invalid(f"input {input_name!r} is nested {array.ndim} lists deep; the signature takes "
                          f"rank {len(spec.shape)}.")
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


def parse_predict_body(body, specs: dict, limits: Limits | None = None) -> tuple[dict, str]:
    """Turns a REST predict body into input arrays; returns `(inputs, "row" | "columnar")`.

    Args:
        body: the parsed JSON body.
        specs: dict of input name to `tf.TensorSpec` of the chosen signature.
        limits: `Limits` or None. The batch size is checked before any input
            is converted.
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
        if limits is not None:
            limits.check_batch("instances", len(instances))
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
    if limits is not None:
        for name, value in inputs.items():
            if isinstance(value, list):
                limits.check_batch(name, len(value))
    return {name: _to_array(value, name, specs.get(name)) for name, value in inputs.items()}, "columnar"


@dataclasses.dataclass
class RawBody:
    """A REST answer that is not JSON (the Prometheus exposition)."""

    content_type: str
    body: bytes


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


def _tf_serving_error(error: ServingError) -> dict:
    return {"error": error.message}


@dataclasses.dataclass(frozen=True)
class Route:
    """One POST route of the REST API.

    Args:
        pattern: compiled regex matched against the URL path.
        api: str or None. The `api` label the metrics count it under (a fixed
            set, whatever the client sends); None: the path's `method` group.
        handler: str. The `RestApi` method answering it, called as
            `handler(match, raw_body, deadline, record) -> JSON answer`.
        error_shape: `ServingError -> dict`, the error JSON its clients expect.
            Defaults to TF Serving's `{"error": "..."}`.
    """

    pattern: re.Pattern
    api: str | None
    handler: str
    error_shape: Callable[[ServingError], dict] = _tf_serving_error


def _exactly(path: str) -> re.Pattern:
    return re.compile(re.escape(path) + r"\Z")


# Every POST path, in the order they are tried.
POST_ROUTES = (
    Route(_exactly(EMBEDDINGS_PATH), "embeddings", "_embeddings", openai_error),
    Route(_exactly(EMBED_PATH), "embed", "_tei", tei_error),
    Route(_exactly(PREDICT_PATH), "tei_predict", "_tei", tei_error),
    Route(_exactly(RERANK_PATH), "rerank", "_tei", tei_error),
    Route(_exactly(TOKENIZE_PATH), "tokenize", "_tei", tei_error),
    Route(_SEARCH, "search", "_index_search"),
    Route(_PREDICT, None, "_model_method"),
)
# The TeiApis method answering each TEI POST path.
_TEI_METHODS = {EMBED_PATH: "embed", PREDICT_PATH: "predict", RERANK_PATH: "rerank",
                TOKENIZE_PATH: "tokenize"}
# Paths any client may GET without the --api_key: the health check and the metrics (as TEI).
PUBLIC_PATHS = frozenset((HEALTH_PATH, METRICS_PATH))


def post_route(path: str) -> tuple[Route | None, re.Match | None]:
    """The route of a POST path and its match, or `(None, None)`."""
    for route in POST_ROUTES:
        match = route.pattern.match(path)
        if match:
            return route, match
    return None, None


def _api_of(path: str) -> str:
    """The `api` label of a POST path (a fixed set, whatever the client sends)."""
    route, match = post_route(path)
    if route is None:
        return "unknown"
    return route.api or match["method"]


def error_body(path: str, error: ServingError) -> dict:
    """The error JSON a client of `path` expects: OpenAI's, TEI's, or TF Serving's `{"error": "..."}`."""
    if path == MODELS_PATH:
        return openai_error(error)
    if path in (INFO_PATH, HEALTH_PATH):
        return tei_error(error)
    route, _ = post_route(path)
    return (route.error_shape if route is not None else _tf_serving_error)(error)


class RestApi:
    """Answers REST paths and bodies with `(HTTP status, JSON object)`; any HTTP server can carry it.

    Args:
        predictor: `Predictor`.
        manager: `ModelManager`.
        indexes: dict or None. Index name -> `kbert.index.IndexSearcher`,
            answered at `/v1/indexes/<name>:search`.
        metrics: `ServingMetrics` or None (the predictor's). Every POST is
            counted and timed; GET `/monitoring/prometheus/metrics` shows them.
        tei_model: str or None. The model TEI's routes answer when a request
            names none (`--tei_model`).
        max_batch_tokens: int. `--max_batch_tokens`, which TEI's `/info` reports.

    Example:

    >>> api = RestApi(predictor, manager)
    >>> api.post("/v1/models/sst2:predict", b'{"instances": ["a gorgeous film"]}')
    (200, {'predictions': [{'label': 'positive', ...}]})
    """

    def __init__(self, predictor, manager, indexes: dict | None = None, metrics=None,
                 tei_model: str | None = None, max_batch_tokens: int = 0):
        self.predictor = predictor
        self.manager = manager
        self.indexes = dict(indexes or {})
        self.metrics = metrics or predictor.metrics
        self.encoder_apis = EncoderApis(predictor)
        self.tei_apis = TeiApis(predictor, tei_model, max_batch_tokens)
        self.example_apis = ExampleApis(predictor)

    def get(self, path: str) -> tuple[int, dict]:
        """Model status (`/v1/models/<name>[/versions/<v>]`), metadata (`.../metadata`), the metrics,
        OpenAI's model list, TEI's `/info` and `/health`."""
        if path == METRICS_PATH:
            return 200, RawBody(CONTENT_TYPE, self.metrics.exposition())
        if path == HEALTH_PATH:
            status, payload = self.tei_apis.health()
            return status, payload if payload is not None else RawBody("text/plain; charset=utf-8", b"")
        try:
            if path == MODELS_PATH:
                return 200, self.encoder_apis.models()
            if path == INFO_PATH:
                return 200, self.tei_apis.info()
            index = _INDEX.match(path)
            if index:
                return 200, {"index": index[1], "metadata": dataclasses.asdict(
                    self._index(index[1]).metadata)}
            match = _STATUS.match(path)
            if not match:
                raise not_found(f"Malformed request: GET {path}; try /v1/models/<name> or "
                                "/v1/models/<name>/metadata.")
            name, version, label, metadata = match.groups()
            version = int(version) if version else None
            if metadata:
                servable, signature_map = self.predictor.metadata(name, version, label)
                return 200, {
                    "model_spec": {"name": servable.name, "signature_name": "", "version": str(servable.version)},
                    "metadata": {"signature_def": json_format.MessageToDict(
                        signature_map, preserving_proto_field_name=True)},
                }
            if label:
                version = self.manager.get(name, label=label).version
            response = status_response(self.manager.status(name, version))
            answer = {"model_version_status": [
                {"version": str(entry.version), "state": type(entry).State.Name(entry.state),
                 "status": {"error_code": _code_name(entry.status.error_code),
                            "error_message": entry.status.error_message}}
                for entry in response.model_version_status]}
            if version is None and label is None:
                # OpenAI's GET /v1/models/<id> is this path too: both clients read their own keys.
                answer.update(self.encoder_apis.model(name))
            return 200, answer
        except ServingError as e:
            return e.http_status, error_body(path, e)

    def post(self, path: str, raw: bytes, deadline: float | None = None) -> tuple[int, dict]:
        """Predict, Classify, Regress (`/v1/models/<name>[/versions/<v> | /labels/<l>]:<method>`),
        `/v1/embeddings`, TEI's routes or an index search; counted and timed in the metrics.

        Args:
            path: str. The URL path, without the query.
            raw: bytes. The body.
            deadline: float or None. `time.monotonic()` instant after which the
                model is not run.
        """
        with self.metrics.request(_api_of(path), "rest") as record:
            status, payload = self._post(path, raw, deadline, record)
            record.status = status_of_http(status)
        return status, payload

    def _post(self, path: str, raw: bytes, deadline: float | None, record) -> tuple[int, dict]:
        try:
            check_deadline(deadline, "a thread was free to read it")  # waited in the pool too long
            route, match = post_route(path)
            if route is None:
                raise not_found(f"Malformed request: POST {path}; predict at "
                                "/v1/models/<name>[/versions/<v>]:predict (or :classify, :regress), "
                                f"{EMBEDDINGS_PATH}, or TEI's {EMBED_PATH}, {PREDICT_PATH}, {RERANK_PATH}, "
                                f"{TOKENIZE_PATH}.")
            return 200, getattr(self, route.handler)(match, raw, deadline, record)
        except ServingError as e:
            return e.http_status, error_body(path, e)
        except RecursionError:  # nesting below the JSON parser's own limit, e.g. in 'instances'
            return 400, error_body(path, invalid(_TOO_DEEP))

    def _embeddings(self, match, raw: bytes, deadline: float | None, record) -> dict:
        return self.encoder_apis.embeddings(_parse_json(raw), deadline, record)

    def _tei(self, match, raw: bytes, deadline: float | None, record) -> list:
        method = getattr(self.tei_apis, _TEI_METHODS[match.string])
        return method(_parse_json(raw), deadline, record)

    def _index_search(self, match, raw: bytes, deadline: float | None, record) -> dict:
        return self._search(match[1], _parse_json(raw))

    def _model_method(self, match, raw: bytes, deadline: float | None, record) -> dict:
        """`:predict`, `:classify` or `:regress` of `/v1/models/<name>[/versions/<v> | /labels/<l>]`."""
        name, version, label, method = match.groups()
        version = int(version) if version else None
        body = _parse_json(raw)
        if method != "predict":
            return self.example_apis.rest(method, name, version, label, body, deadline, record)
        signature_name = body.get("signature_name", "") if isinstance(body, dict) else ""
        if not isinstance(signature_name, str):
            raise invalid("'signature_name' must be a string.")
        servable = self.manager.get(name, version, label)
        signature = servable.signature(signature_name)
        inputs, form = parse_predict_body(body, servable.input_specs[signature], self.predictor.limits)
        _, _, outputs = self.predictor.predict(name, version, label, signature, inputs, servable=servable,
                                               deadline=deadline, record=record)
        return format_predict_response(outputs, form)

    def _index(self, name: str):
        if name not in self.indexes:
            known = ", ".join(sorted(self.indexes)) or "none (start kbert-serve with --index_dir)"
            raise not_found(f"No index named {name!r}; this server has: {known}.")
        return self.indexes[name]

    def _search(self, name: str, body) -> dict:
        """`{"queries": [...], "top_k": k}` -> the index's hits (kbert.index.IndexSearcher)."""
        searcher = self._index(name)
        if not isinstance(body, dict) or "queries" not in body:
            raise invalid('The request body must be a JSON object {"queries": [...], "top_k": 10}.')
        extra = sorted(set(body) - {"queries", "top_k"})
        if extra:
            raise invalid(f"Unknown key(s) {extra}; a search takes 'queries' and 'top_k'.")
        queries, top_k = body["queries"], body.get("top_k", 10)
        if not isinstance(queries, list) or not queries:
            raise invalid("'queries' must be a non-empty list of query strings.")
        if any(not isinstance(query, str) for query in queries):
            raise invalid("'queries' must hold strings only.")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise invalid(f"'top_k' must be an integer >= 1; got {json.dumps(top_k)[:40]}.")
        self.predictor.limits.check_inputs({"queries": np.array(queries, dtype=object)})
        try:
            return searcher.search(queries, top_k).to_json()
        except ValueError as e:
            raise invalid(str(e)) from None


_TOO_DEEP = (f"Malformed JSON request body: nested deeper than kbert-serve reads (about "
             f"{sys.getrecursionlimit()} levels); a predict request needs a few levels plus the rank of its "
             "inputs.")


def _parse_json(raw: bytes):
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise invalid(f"Malformed JSON request body: {e}") from None
    except RecursionError:  # the C parser refuses deep nesting this way; it is the client's error
        raise invalid(_TOO_DEEP) from None


def _code_name(code: int) -> str:
    for status in grpc.StatusCode:
        if status.value[0] == code:
            return status.name
    return str(code)
