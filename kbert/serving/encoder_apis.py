"""The REST APIs retrieval and RAG tools already speak: OpenAI's embeddings and TEI's rerank.

    POST /v1/embeddings {"model": "<name>", "input": "text" | ["text", ...],
                         "encoding_format": "float" | "base64", "dimensions"?, "user"?}
      -> {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...] | "<base64>"}],
          "model": "<name>", "usage": {"prompt_tokens": n, "total_tokens": n}}
    POST /rerank {"query": "...", "texts": ["...", ...], "raw_scores": false, "return_text": false,
                  "truncate"?, "model"?}
      -> [{"index": i, "score": s, "text"?: "..."}, ...]   sorted by score, highest first

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
vector, as OpenAI encodes it. Rerank scores are the cross-encoder's
(`serving_default`: `query`, `document` -> `score`) passed through a sigmoid,
as TEI does, or the raw scores with `raw_scores`; without `model` the
server's only re-ranker answers. Texts longer than the model's
length are truncated as fine-tuning did (`truncate` is accepted either way).

Both run through Predict's path: the same limits (`--max_batch_size` on the
number of texts, `--max_text_bytes` per text), batching and deadlines. Errors
are OpenAI's shape for `/v1/embeddings` (`{"error": {"message", "type",
"param", "code"}}`, an unknown model 404 `model_not_found`) and TEI's for
`/rerank` (`{"error": "...", "error_type": "Validation" | ...}`).
"""

from __future__ import annotations

import base64
import json

import grpc
import numpy as np

from kbert.serving.errors import ServingError
from kbert.serving.export_info import recorded_serving

EMBEDDINGS_PATH = "/v1/embeddings"
RERANK_PATH = "/rerank"
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
}
# TEI's `error_type` by gRPC code (text-embeddings-inference's ErrorType names).
_TEI_TYPES = {
    grpc.StatusCode.INVALID_ARGUMENT: "Validation",
    grpc.StatusCode.NOT_FOUND: "Validation",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "Overloaded",
    grpc.StatusCode.UNAVAILABLE: "Overloaded",
    grpc.StatusCode.DEADLINE_EXCEEDED: "Backend",
}


class ApiError(ServingError):
    """A `ServingError` that also names the request field at fault (OpenAI's `param`) and an error code."""

    def __init__(self, code: grpc.StatusCode, message: str, param: str | None = None,
                 error_code: str | None = None):
        super().__init__(code, message)
        self.param = param
        self.error_code = error_code


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(grpc.StatusCode.INVALID_ARGUMENT, message, param)


def openai_error(error: ServingError) -> dict:
    """`{"error": {"message", "type", "param", "code"}}` of a refused `/v1/embeddings` request."""
    return {"error": {"message": error.message,
                      "type": _OPENAI_TYPES.get(error.code, "server_error"),
                      "param": getattr(error, "param", None),
                      "code": getattr(error, "error_code", None) or error.code.name.lower()}}


def tei_error(error: ServingError) -> dict:
    """`{"error", "error_type"}` of a refused `/rerank` request."""
    return {"error": error.message, "error_type": _TEI_TYPES.get(error.code, "Backend")}


def _strings(value, param: str, allow_single: bool) -> list[str]:
    if allow_single and isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise _bad(f"'{param}' must be {'a string or ' if allow_single else ''}a non-empty list of strings; got "
                   f"{json.dumps(value)[:60]}.", param)
    for index, item in enumerate(value):
        if not isinstance(item, str):
            hint = (" Token ids are not accepted: send text (the model tokenizes it)."
                    if isinstance(item, (int, list)) and not isinstance(item, bool) else "")
            raise _bad(f"'{param}'[{index}] is {json.dumps(item)[:40]}, not a string.{hint}", param)
        if not item:
            raise _bad(f"'{param}'[{index}] is an empty string; send text to embed or score.", param)
    return value


def _object(body, keys: set, required: set, example: str) -> dict:
    if not isinstance(body, dict):
        raise _bad(f"The request body must be a JSON object, e.g. {example}.")
    unknown = sorted(set(body) - keys)
    if unknown:
        raise _bad(f"Unrecognized request argument(s) supplied: {', '.join(unknown)}; expected {sorted(keys)}.",
                   unknown[0])
    missing = sorted(required - set(body))
    if missing:
        raise _bad(f"Missing required argument(s): {', '.join(missing)}, e.g. {example}.", missing[0])
    return body


def _flag(body: dict, key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise _bad(f"'{key}' must be true or false; got {json.dumps(value)[:40]}.", key)
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


def _default_outputs(servable) -> list[str]:
    default = servable.signature_defs.get("serving_default")
    return sorted(default.outputs) if default is not None else []


class EncoderApis:
    """`/v1/embeddings` and `/rerank` over a `Predictor`.

    Args:
        predictor: `Predictor` (its manager finds the models, its limits apply).

    Example:

    >>> apis = EncoderApis(predictor)
    >>> apis.embeddings({"model": "minilm", "input": ["a film"]})["usage"]
    {'prompt_tokens': 4, 'total_tokens': 4}
    >>> apis.rerank({"query": "who", "texts": ["Marie Curie was ...", "It rained."]})
    [{'index': 0, 'score': 0.93}, {'index': 1, 'score': 0.02}]
    """

    def __init__(self, predictor):
        self.predictor = predictor

    def _servable(self, name):
        if not isinstance(name, str) or not name:
            raise _bad(f"'model' must be a model name of this server; got {json.dumps(name)[:40]}.", "model")
        try:
            return self.predictor.manager.get(name)
        except ServingError as e:
            if e.code == grpc.StatusCode.NOT_FOUND:
                raise ApiError(e.code, f"The model '{name}' does not exist on this server; it serves "
                               f"{', '.join(sorted(self.predictor.manager.configs))}.", "model",
                               "model_not_found") from None
            raise

    def embeddings(self, body, deadline: float | None = None, record=None) -> dict:
        """Answers `POST /v1/embeddings` (OpenAI's request and response).

        Raises:
            ServingError: (often an `ApiError` naming the field) for the client.
        """
        body = _object(body, {"model", "input", "encoding_format", "dimensions", "user"}, {"model", "input"},
                       '{"model": "minilm", "input": ["a gorgeous film"]}')
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            raise _bad(f"'encoding_format' must be 'float' or 'base64'; got {json.dumps(encoding)[:40]}.",
                       "encoding_format")
        if "user" in body and not isinstance(body["user"], str):
            raise _bad("'user' must be a string.", "user")
        servable = self._servable(body["model"])
        raw_input = body["input"]
        if isinstance(raw_input, list):  # refuse a huge list before looking at its items
            self.predictor.limits.check_batch("input", len(raw_input))
        texts = _strings(raw_input, "input", allow_single=True)
        signature = embedding_signature(servable)
        if signature is None:
            raise _bad(f"The model '{servable.name}' does not embed text: its serving_default gives "
                       f"{_default_outputs(servable)}. "
                       "/v1/embeddings serves models exported from a pre-trained directory or fine-tuned for "
                       "similarity or retrieval; use /v1/models/<name>:predict for others.", "model")
        shape = servable.signature_defs[signature].outputs["embedding"].tensor_shape.dim
        size = shape[-1].size if shape else -1
        dimensions = body.get("dimensions")
        if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int)
                                       or (size > 0 and dimensions != size)):
            raise _bad(f"'dimensions' is {json.dumps(dimensions)[:20]}; the model '{servable.name}' gives "
                       f"{size} dimensions and cannot shorten them. Leave 'dimensions' out.", "dimensions")
        inputs = {"text": np.array([text.encode("utf-8") for text in texts], dtype=object)}
        _, _, outputs = self.predictor.predict(servable.name, servable.version, None, signature, inputs,
                                               servable=servable, deadline=deadline, record=record)
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

    def _reranker(self, name):
        if name is not None:
            servable = self._servable(name)
            if not is_reranker(servable):
                raise _bad(f"The model '{name}' is not a re-ranker: its serving_default takes "
                           f"{sorted(servable.input_specs.get('serving_default', {}))}; /rerank needs a "
                           "cross-encoder (query, document -> score).", "model")
            return servable
        found = []
        for config_name in sorted(self.predictor.manager.configs):
            try:
                servable = self.predictor.manager.get(config_name)
            except ServingError:  # no version loaded yet
                continue
            if is_reranker(servable):
                found.append(servable)
        if len(found) != 1:
            names = ", ".join(s.name for s in found) or "none"
            raise _bad(f"Name the re-ranker with \"model\": this server has {len(found)} ({names}); /rerank "
                       "without \"model\" needs exactly one cross-encoder (kbert-finetune --task=rerank).",
                       "model")
        return found[0]

    def rerank(self, body, deadline: float | None = None, record=None) -> list:
        """Answers `POST /rerank` (TEI's request and response): texts by the cross-encoder's score, best first.

        Raises:
            ServingError: for the client.
        """
        body = _object(body, {"query", "texts", "raw_scores", "return_text", "truncate", "truncation_direction",
                              "model"}, {"query", "texts"},
                       '{"query": "who was Marie Curie?", "texts": ["Marie Curie was ...", "It rained."]}')
        query = body["query"]
        if not isinstance(query, str) or not query:
            raise _bad(f"'query' must be a non-empty string; got {json.dumps(query)[:40]}.", "query")
        raw_scores, return_text = _flag(body, "raw_scores"), _flag(body, "return_text")
        _flag(body, "truncate")
        if body.get("truncation_direction", "right") not in ("right", "Right"):
            raise _bad("'truncation_direction' must be 'right': kbert truncates as fine-tuning did.",
                       "truncation_direction")
        servable = self._reranker(body.get("model"))
        if isinstance(body["texts"], list):
            self.predictor.limits.check_batch("texts", len(body["texts"]))
        texts = _strings(body["texts"], "texts", allow_single=False)
        encoded_query = query.encode("utf-8")
        inputs = {"query": np.array([encoded_query] * len(texts), dtype=object),
                  "document": np.array([text.encode("utf-8") for text in texts], dtype=object)}
        _, _, outputs = self.predictor.predict(servable.name, servable.version, None, "serving_default", inputs,
                                               servable=servable, deadline=deadline, record=record)
        scores = np.asarray(outputs["score"], dtype=np.float32)
        if not raw_scores:
            scores = 1.0 / (1.0 + np.exp(-scores.astype(np.float64)))
        order = sorted(range(len(texts)), key=lambda i: -float(scores[i]))  # stable: ties keep request order
        answer = []
        for i in order:
            entry = {"index": i, "score": float(scores[i])}
            if return_text:
                entry["text"] = texts[i]
            answer.append(entry)
        return answer
