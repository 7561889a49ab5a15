"""OpenAI's embeddings and models APIs, and what kbert's OpenAI- and TEI-style routes share.

    POST /v1/embeddings {"model": "<name>", "input": "text" | ["text", ...],
                         "encoding_format": "float" | "base64", "dimensions"?, "user"?}
      -> {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...] | "<base64>"}],
          "model": "<name>", "usage": {"prompt_tokens": n, "total_tokens": n}}
    GET  /v1/models               -> {"object": "list", "data": [{"id", "object": "model", "created", "owned_by"}]}

`model` is a model name of the server's config (TF Serving's `name`), its
latest version. Which versions answer which API is what their export records
(`kbert.serving.export_info`: `encoder_apis`); for an export without that
record (made before it, or not by kbert), what its signatures take and give.
Embeddings come from an export that answers `embeddings` (a pre-trained
encoder's, similarity's or retrieval's): its `embeddings` signature
(`embedding` plus `num_tokens`, the pieces each text was read as,
`[CLS]`/`[SEP]` included, after truncation, which is what `usage` adds up),
or, for exports made before that signature existed, `serving_default`, whose
usage is reported as 0. base64 is the little-endian float32 bytes of each
vector, as OpenAI encodes it. Texts longer than the model's length are
truncated as fine-tuning did.

A request may hold up to 2,048 texts (`MAX_INPUTS`, OpenAI's limit; LangChain
sends 1,000 at a time), run as batches of at most `--max_batch_size`
(`run_in_batches`) through Predict's path: the same per-text limit
(`--max_text_bytes`), batching and deadlines. Errors are OpenAI's shape
(`{"error": {"message", "type", "param", "code"}}`, an unknown model 404
`model_not_found`). TEI's routes (`/embed`, `/predict`, `/rerank`,
`/tokenize`, `/info`, `/health`) are `kbert.serving.tei_apis`.
"""

from __future__ import annotations

import base64
import json
import os

import grpc
import numpy as np

from kbert.serving.errors import ServingError
from kbert.serving.export_info import recorded_serving

EMBEDDINGS_PATH = "/v1/embeddings"
MODELS_PATH = "/v1/models"
# Texts one request may hold (OpenAI's limit on `input`); run as batches of --max_batch_size.
MAX_INPUTS = 2048
USAGE_SIGNATURE = "embeddings"
DEFAULT_SIGNATURE = "serving_default"
# The API names an export records (`encoder_apis`; kbert.tasks.serving writes them).
EMBEDDINGS_API = "embeddings"
RERANK_API = "rerank"

# OpenAI's error `type` by gRPC code (its published error types; 4xx from the request, 5xx from the server).
_OPENAI_TYPES = {
    grpc.StatusCode.INVALID_ARGUMENT: "invalid_request_error",
    grpc.StatusCode.NOT_FOUND: "invalid_request_error",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "invalid_request_error",
    grpc.StatusCode.UNAVAILABLE: "server_error",
    grpc.StatusCode.DEADLINE_EXCEEDED: "timeout",
    grpc.StatusCode.UNAUTHENTICATED: "invalid_request_error",
}
# OpenAI's error `code` where it has its own name for one.
_OPENAI_CODES = {grpc.StatusCode.UNAUTHENTICATED: "invalid_api_key"}
# TEI's `error_type` by gRPC code (text-embeddings-inference's ErrorType names).
_TEI_TYPES = {
    grpc.StatusCode.INVALID_ARGUMENT: "Validation",
    grpc.StatusCode.NOT_FOUND: "Validation",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "Overloaded",
    grpc.StatusCode.UNAVAILABLE: "Overloaded",
    grpc.StatusCode.DEADLINE_EXCEEDED: "Backend",
    grpc.StatusCode.UNAUTHENTICATED: "Validation",
}


class ApiError(ServingError):
    """A `ServingError` that also names the request field at fault (OpenAI's `param`) and an error code."""

    def __init__(self, code: grpc.StatusCode, message: str, param: str | None = None,
                 error_code: str | None = None):
        super().__init__(code, message)
        self.param = param
        self.error_code = error_code


def bad_request(message: str, param: str | None = None) -> ApiError:
    """INVALID_ARGUMENT (HTTP 400) naming the request field at fault."""
    return ApiError(grpc.StatusCode.INVALID_ARGUMENT, message, param)


def openai_error(error: ServingError) -> dict:
    """`{"error": {"message", "type", "param", "code"}}` of a refused request to an OpenAI route."""
    return {"error": {"message": error.message,
                      "type": _OPENAI_TYPES.get(error.code, "server_error"),
                      "param": getattr(error, "param", None),
                      "code": (getattr(error, "error_code", None) or _OPENAI_CODES.get(error.code)
                               or error.code.name.lower())}}


def tei_error(error: ServingError) -> dict:
    """`{"error", "error_type"}` of a refused request to one of TEI's routes."""
    return {"error": error.message, "error_type": _TEI_TYPES.get(error.code, "Backend")}


def text_list(value, param: str, allow_single: bool) -> list[str]:
    """The texts of a request field: a non-empty list of non-empty strings (or one string).

    Raises:
        ApiError: INVALID_ARGUMENT naming the field and item at fault, or more than `MAX_INPUTS`.
    """
    if allow_single and isinstance(value, str):
        value = [value]
    if isinstance(value, list) and len(value) > MAX_INPUTS:  # refused before looking at its items
        raise bad_request(f"'{param}' holds {len(value)} texts; a request takes at most {MAX_INPUTS} "
                          "(OpenAI's limit). Send them in several requests.", param)
    if not isinstance(value, list) or not value:
        raise bad_request(f"'{param}' must be {'a string or ' if allow_single else ''}a non-empty list of "
                          f"strings; got {json.dumps(value)[:60]}.", param)
    for index, item in enumerate(value):
        if not isinstance(item, str):
            hint = (" Token ids are not accepted: send text (the model tokenizes it)."
                    if isinstance(item, (int, list)) and not isinstance(item, bool) else "")
            raise bad_request(f"'{param}'[{index}] is {json.dumps(item)[:40]}, not a string.{hint}", param)
        if not item:
            raise bad_request(f"'{param}'[{index}] is an empty string; send text to embed or score.", param)
    return value


def request_object(body, keys: set, required: set, example: str) -> dict:
    """The request body as a dict with only `keys` and all of `required`, else an `ApiError`."""
    if not isinstance(body, dict):
        raise bad_request(f"The request body must be a JSON object, e.g. {example}.")
    unknown = sorted(set(body) - keys)
    if unknown:
        raise bad_request(f"Unrecognized request argument(s) supplied: {', '.join(unknown)}; expected "
                          f"{sorted(keys)}.", unknown[0])
    missing = sorted(required - set(body))
    if missing:
        raise bad_request(f"Missing required argument(s): {', '.join(missing)}, e.g. {example}.", missing[0])
    return body


def flag(body: dict, key: str, default: bool = False) -> bool:
    """A true/false field of the request (`default` when absent)."""
    value = body.get(key, default)
    if not isinstance(value, bool):
        raise bad_request(f"'{key}' must be true or false; got {json.dumps(value)[:40]}.", key)
    return value


def _recorded_apis(servable) -> set[str] | None:
    """The encoder APIs the version's export records, or None when it records none."""
    record = recorded_serving(servable.export_info)
    return None if record is None else set(record.get("encoder_apis") or ())


def _takes_text_gives_embedding(servable, signature: str) -> bool:
    return (signature in servable.signature_defs and set(servable.input_specs.get(signature, {})) == {"text"}
            and "embedding" in servable.signature_defs[signature].outputs)


def embedding_signature(servable) -> str | None:
    """The signature `/v1/embeddings` runs on a version, or None when it does not embed text.

    `embeddings` (with `num_tokens`, for `usage`) where the version has it,
    else `serving_default`, for a version whose export records the
    `embeddings` API; for an export without the record, the first of the two
    that takes `text` and gives `embedding`.

    Args:
        servable: `Servable`.

    Returns:
        str or None.

    Example:

    >>> embedding_signature(manager.get("minilm"))
    'embeddings'
    """
    apis = _recorded_apis(servable)
    if apis is not None:
        if EMBEDDINGS_API not in apis:
            return None
        return USAGE_SIGNATURE if USAGE_SIGNATURE in servable.signature_defs else DEFAULT_SIGNATURE
    return next((s for s in (USAGE_SIGNATURE, DEFAULT_SIGNATURE) if _takes_text_gives_embedding(servable, s)),
                None)


def is_reranker(servable) -> bool:
    """Whether a version answers `/rerank`: its export records the `rerank` API (an export
    without the record: `serving_default` takes `query` and `document` and gives `score`).

    Example:

    >>> is_reranker(manager.get("rerank"))
    True
    """
    apis = _recorded_apis(servable)
    if apis is not None:
        return RERANK_API in apis
    default = servable.signature_defs.get(DEFAULT_SIGNATURE)
    return (default is not None and set(servable.input_specs.get(DEFAULT_SIGNATURE, {})) == {"query", "document"}
            and "score" in default.outputs)


def default_outputs(servable) -> list[str]:
    default = servable.signature_defs.get("serving_default")
    return sorted(default.outputs) if default is not None else []


def is_classifier(servable) -> bool:
    """Whether a version answers TEI's `/predict`: its `serving_default` takes `text` (and
    `text_pair`) and gives `probabilities` (a kbert classifier; the labels are its export's).

    Example:

    >>> is_classifier(manager.get("sst2"))
    True
    """
    default = servable.signature_defs.get(DEFAULT_SIGNATURE)
    inputs = set(servable.input_specs.get(DEFAULT_SIGNATURE, {}))
    return (default is not None and inputs in ({"text"}, {"text", "text_pair"})
            and "probabilities" in default.outputs)


def run_in_batches(predictor, servable, signature: str, inputs: dict, deadline: float | None,
                   record) -> dict:
    """Runs a signature on up to `MAX_INPUTS` examples as batches of `--max_batch_size`.

    Args:
        predictor: `Predictor` (its limits give the batch size).
        servable: `Servable`.
        signature: str.
        inputs: dict of input name -> array `[examples, ...]`.
        deadline: float or None.
        record: the request's `RequestRecord` or None.

    Returns:
        dict of output name -> the batches' outputs concatenated on axis 0.
    """
    size = predictor.limits.max_batch_size
    total = len(next(iter(inputs.values())))
    parts = []
    for start in range(0, total, size):
        chunk = {key: value[start:start + size] for key, value in inputs.items()}
        _, _, outputs = predictor.predict(servable.name, servable.version, None, signature, chunk,
                                          servable=servable, deadline=deadline, record=record)
        parts.append(outputs)
    return {key: np.concatenate([part[key] for part in parts], axis=0) for key in parts[0]}


def find_model(predictor, name) -> "Servable":
    """The latest version of the model a request names (its `model`).

    Raises:
        ApiError: 400 for a name that is not a string, 404 `model_not_found`.
    """
    if not isinstance(name, str) or not name:
        raise bad_request(f"'model' must be a model name of this server; got {json.dumps(name)[:40]}.", "model")
    try:
        return predictor.manager.get(name)
    except ServingError as e:
        if e.code == grpc.StatusCode.NOT_FOUND:
            raise ApiError(e.code, f"The model '{name}' does not exist on this server; it serves "
                           f"{', '.join(sorted(predictor.manager.configs))}.", "model",
                           "model_not_found") from None
        raise


class EncoderApis:
    """OpenAI's `/v1/embeddings` and `/v1/models` over a `Predictor`.

    Args:
        predictor: `Predictor` (its manager finds the models, its limits apply).

    Example:

    >>> apis = EncoderApis(predictor)
    >>> apis.embeddings({"model": "minilm", "input": ["a film"]})["usage"]
    {'prompt_tokens': 4, 'total_tokens': 4}
    >>> apis.models()["data"][0]
    {'id': 'minilm', 'object': 'model', 'created': 1764390000, 'owned_by': 'kbert'}
    """

    def __init__(self, predictor):
        self.predictor = predictor

    def embeddings(self, body, deadline: float | None = None, record=None) -> dict:
        """Answers `POST /v1/embeddings` (OpenAI's request and response).

        Raises:
            ServingError: (often an `ApiError` naming the field) for the client.
        """
        body = request_object(body, {"model", "input", "encoding_format", "dimensions", "user"},
                              {"model", "input"}, '{"model": "minilm", "input": ["a gorgeous film"]}')
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            raise bad_request(f"'encoding_format' must be 'float' or 'base64'; got {json.dumps(encoding)[:40]}.",
                              "encoding_format")
        if "user" in body and not isinstance(body["user"], str):
            raise bad_request("'user' must be a string.", "user")
        servable = find_model(self.predictor, body["model"])
        texts = text_list(body["input"], "input", allow_single=True)
        signature = embedding_signature(servable)
        if signature is None:
            raise bad_request(f"The model '{servable.name}' does not embed text: its serving_default gives "
                              f"{default_outputs(servable)}. /v1/embeddings serves models exported from a "
                              "pre-trained directory or fine-tuned for similarity or retrieval; use "
                              "/v1/models/<name>:predict for others.", "model")
        shape = servable.signature_defs[signature].outputs["embedding"].tensor_shape.dim
        size = shape[-1].size if shape else -1
        dimensions = body.get("dimensions")
        if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int)
                                       or (size > 0 and dimensions != size)):
            raise bad_request(f"'dimensions' is {json.dumps(dimensions)[:20]}; the model '{servable.name}' "
                              f"gives {size} dimensions and cannot shorten them. Leave 'dimensions' out.",
                              "dimensions")
        inputs = {"text": np.array([text.encode("utf-8") for text in texts], dtype=object)}
        outputs = run_in_batches(self.predictor, servable, signature, inputs, deadline, record)
        vectors = np.asarray(outputs["embedding"], dtype=np.float32)
        tokens = int(np.sum(outputs["num_tokens"])) if "num_tokens" in outputs else 0
        if encoding == "base64":
            encoded = [base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii") for vector in vectors]
        else:
            encoded = vectors.tolist()
        return {"object": "list",
                "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(encoded)],
                "model": servable.name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    def models(self) -> dict:
        """Answers `GET /v1/models` (OpenAI's list): every model of the config, loaded or not."""
        return {"object": "list", "data": [self.model(name) for name in self.predictor.manager.configs]}

    def model(self, name: str) -> dict:
        """OpenAI's model object of one configured model: `id`, `object`, `created`, `owned_by`.

        `created` is when its latest loaded version was exported (the Unix time
        of its `saved_model.pb`), 0 while none is loaded.
        """
        try:
            path = os.path.join(self.predictor.manager.get(name).path, "saved_model.pb")
            created = int(os.path.getmtime(path))
        except (ServingError, OSError):
            created = 0
        return {"id": name, "object": "model", "created": created, "owned_by": "kbert"}
