"""text-embeddings-inference's (TEI) REST API: what TEI's clients call, answered by kbert models.

    POST /embed    {"inputs": "text" | ["text", ...], "normalize": true, "truncate"?: bool,
                    "truncation_direction": "right", "model"?}          -> [[float, ...], ...]
    POST /predict  {"inputs": "text" | ["a", "b"] | [["text"], ["a", "b"], ...], "raw_scores": false,
                    "truncate"?, "truncation_direction"?, "model"?}
                   -> [{"score", "label"}, ...] (one input) | [[{"score", "label"}, ...], ...] (a batch)
    POST /rerank   {"query": "...", "texts": ["...", ...], "raw_scores": false, "return_text": false,
                    "truncate"?, "truncation_direction"?, "model"?}     -> [{"index", "score", "text"?}, ...]
    POST /tokenize {"inputs": "text" | ["text", ...], "add_special_tokens": true, "model"?}
                   -> [[{"id", "text", "special", "start", "stop"}, ...], ...]
    GET  /info     the model TEI's routes answer: its id, type (labels, pooling), lengths and limits
    GET  /health   200 once every configured model has a version loaded, else 503

TEI serves one model; kbert-serve serves several. A TEI route answers the
model the request names in `model` (kbert's addition; TEI's clients send
none), else `--tei_model`, else the only model of the server that answers the
route (the only embedding model for `/embed`, classifier for `/predict`,
re-ranker for `/rerank`, model for `/tokenize` and `/info`); with several and
no choice made the request is refused, naming them.

As in TEI: `/predict` gives every label's softmax probability, highest first
(`raw_scores`: the logits); `/rerank` the sigmoid of the cross-encoder's score
(`raw_scores`: the score), best first; `/embed` L2-normalizes unless
`normalize` is false (then the model's own vectors, which are unit vectors when
its pooling normalizes, as sentence-transformers' `encode` gives them);
`/tokenize` does not truncate, and its `start`/`stop` are UTF-8 byte offsets
(None for special tokens), `text` the input's bytes between them. Texts are
cut to the model's length from the right, as fine-tuning did
(`truncation_direction` `left` is refused); `truncate: false` on `/embed`
refuses a text over that length instead, as TEI does. Up to 2,048 inputs a
request, run as batches of `--max_batch_size`. Errors have TEI's shape,
`{"error": "...", "error_type": "Validation" | "Overloaded" | "Backend" |
"Unhealthy"}`, with kbert's HTTP statuses (400, 404, 413, 429, 503, 504).
"""

from __future__ import annotations

import json
from importlib import metadata
from typing import Callable

import numpy as np

from kbert.serving.encoder_apis import MAX_INPUTS
from kbert.serving.encoder_apis import bad_request
from kbert.serving.encoder_apis import default_outputs
from kbert.serving.encoder_apis import embedding_signature
from kbert.serving.encoder_apis import find_model
from kbert.serving.encoder_apis import flag
from kbert.serving.encoder_apis import is_classifier
from kbert.serving.encoder_apis import is_reranker
from kbert.serving.encoder_apis import request_object
from kbert.serving.encoder_apis import run_in_batches
from kbert.serving.encoder_apis import text_list
from kbert.serving.errors import ServingError
from kbert.serving.example_apis import label_names
from kbert.serving.limits import check_deadline

EMBED_PATH = "/embed"
PREDICT_PATH = "/predict"
RERANK_PATH = "/rerank"
TOKENIZE_PATH = "/tokenize"
INFO_PATH = "/info"
HEALTH_PATH = "/health"


def _truncation_direction(body: dict) -> None:
    direction = body.get("truncation_direction", "right")
    if direction not in ("right", "Right"):
        raise bad_request(f"'truncation_direction' is {json.dumps(direction)[:20]}; kbert cuts texts from the "
                          "right, as fine-tuning did: send 'right' or leave it out.", "truncation_direction")


def _no_prompt(body: dict) -> None:
    if body.get("prompt_name") is not None:
        raise bad_request("'prompt_name' names a sentence-transformers prompt; kbert exports have none. "
                          "Put the prompt in the text or leave 'prompt_name' out.", "prompt_name")


def _predict_inputs(value) -> tuple[list[list[str]], bool]:
    """TEI's `/predict` inputs: a text, a pair `[a, b]`, or a batch `[[a], [a, b], ...]`.

    Returns:
        `(sequences, batched)`: each sequence a list of one or two strings.
    """
    if isinstance(value, str):
        return [[value]], False
    if isinstance(value, list) and value and isinstance(value[0], str):
        if len(value) > 2:
            raise bad_request(f"'inputs' is a list of {len(value)} strings; send one text, a pair "
                              "[text, text_pair], or a batch [[text], [text, text_pair], ...].", "inputs")
        sequences, batched = [value], False
    elif isinstance(value, list) and value and all(isinstance(item, list) for item in value):
        if len(value) > MAX_INPUTS:
            raise bad_request(f"'inputs' holds {len(value)} sequences; a request takes at most {MAX_INPUTS}.",
                              "inputs")
        sequences, batched = value, True
    else:
        raise bad_request(f"'inputs' must be a text, a pair [text, text_pair] or a non-empty batch [[text], "
                          f"...]; got {json.dumps(value)[:60]}.", "inputs")
    for index, sequence in enumerate(sequences):
        if len(sequence) not in (1, 2):
            raise bad_request(f"'inputs'[{index}] holds {len(sequence)} strings; a sequence is [text] or "
                              "[text, text_pair].", "inputs")
        text_list(sequence, f"inputs[{index}]" if batched else "inputs", allow_single=False)
    return sequences, batched


class TeiApis:
    """TEI's routes over a `Predictor`.

    Args:
        predictor: `Predictor` (its manager finds the models, its limits apply).
        default_model: str or None. The model TEI's routes answer when a
            request names none (`--tei_model`); None: the only one that can.
        max_batch_tokens: int. What `/info` reports (`--max_batch_tokens`).

    Example:

    >>> apis = TeiApis(predictor, default_model="minilm")
    >>> apis.embed({"inputs": ["a film"]})
    [[0.012, ...]]
    >>> apis.predict({"inputs": "a gorgeous film"}, model="sst2")
    [{'score': 0.97, 'label': 'positive'}, {'score': 0.03, 'label': 'negative'}]
    """

    def __init__(self, predictor, default_model: str | None = None, max_batch_tokens: int = 0):
        self.predictor = predictor
        self.default_model = default_model
        self.max_batch_tokens = max_batch_tokens

    def _model(self, name, route: str, answers: Callable, kind: str):
        """The servable a TEI route runs: the request's `model`, `--tei_model`, or the only one that answers."""
        if name is None:
            name = self.default_model
        if name is not None:
            servable = find_model(self.predictor, name)
            if not answers(servable):
                raise bad_request(f"The model '{servable.name}' is not {kind}: its serving_default gives "
                                  f"{default_outputs(servable)}; {route} needs one.", "model")
            return servable
        found = []
        for config_name in sorted(self.predictor.manager.configs):
            try:
                servable = self.predictor.manager.get(config_name)
            except ServingError:  # no version loaded yet
                continue
            if answers(servable):
                found.append(servable)
        if len(found) != 1:
            names = ", ".join(servable.name for servable in found) or "none"
            raise bad_request(f"Name the model with \"model\" (or start kbert-serve with --tei_model): this "
                              f"server has {len(found)} that {route} can run ({names}); without a name "
                              f"{route} runs the server's only one ({kind}).", "model")
        return found[0]

    def embed(self, body, deadline: float | None = None, record=None) -> list:
        """Answers `POST /embed`: one vector per text."""
        body = request_object(body, {"inputs", "normalize", "truncate", "truncation_direction", "prompt_name",
                                     "model"}, {"inputs"}, '{"inputs": ["a gorgeous film"]}')
        texts = text_list(body["inputs"], "inputs", allow_single=True)
        normalize = flag(body, "normalize", default=True)
        truncate = body.get("truncate")
        if truncate is not None:
            flag(body, "truncate")
        _truncation_direction(body)
        _no_prompt(body)
        servable = self._model(body.get("model"), EMBED_PATH, lambda s: embedding_signature(s) is not None,
                               "an embedding model")
        if truncate is False:
            self._refuse_long_texts(servable, texts, deadline)
        signature = embedding_signature(servable)
        inputs = {"text": np.array([text.encode("utf-8") for text in texts], dtype=object)}
        vectors = run_in_batches(self.predictor, servable, signature, inputs, deadline, record)["embedding"]
        vectors = np.asarray(vectors, dtype=np.float32)
        if normalize:
            norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
            vectors = vectors / np.maximum(norms, np.finfo(np.float32).tiny)
        return vectors.tolist()

    def _refuse_long_texts(self, servable, texts: list[str], deadline: float | None) -> None:
        """TEI's `truncate: false`: a text over the model's length is refused, not cut."""
        length = servable.truncation_length
        if length is None:  # the model reads long texts in windows: nothing is cut
            return
        if servable.tokenize is None:
            raise bad_request(f"'truncate': false needs the model's tokenizer to count tokens, and the export of "
                              f"'{servable.name}' predates it: re-export it with kbert-export, or leave "
                              "'truncate' out (texts are then cut to the model's length).", "truncate")
        counts = self._tokens(servable, texts, deadline)["num_tokens"]
        longest = int(np.argmax(counts))
        if counts[longest] > length:
            raise bad_request(f"Input validation error: `inputs` must have less than {length} tokens. Given: "
                              f"{int(counts[longest])} (inputs[{longest}]); send \"truncate\": true to cut it.",
                              "inputs")

    def _tokens(self, servable, texts: list[str], deadline: float | None) -> dict:
        """The export's `tokenize` function over the texts, `--max_batch_size` at a time."""
        size = self.predictor.limits.max_batch_size
        inputs = np.array([text.encode("utf-8") for text in texts], dtype=object)
        self.predictor.limits.check_inputs({"inputs": inputs})
        parts = []
        for start in range(0, len(texts), size):
            check_deadline(deadline, "the texts were tokenized")
            parts.append(servable.run_tokenize(inputs[start:start + size]))
        width = max(part["token_ids"].shape[1] for part in parts)
        padded = {}
        for key in parts[0]:
            if key == "num_tokens":
                padded[key] = np.concatenate([part[key] for part in parts])
                continue
            fill = {"texts": b"", "special": False}.get(key, -1)
            padded[key] = np.concatenate([np.pad(part[key], ((0, 0), (0, width - part[key].shape[1])),
                                                 constant_values=fill) for part in parts])
        return padded

    def predict(self, body, deadline: float | None = None, record=None) -> list:
        """Answers `POST /predict`: every label's score, highest first, per input."""
        body = request_object(body, {"inputs", "raw_scores", "truncate", "truncation_direction", "model"},
                              {"inputs"}, '{"inputs": "a gorgeous film"}')
        sequences, batched = _predict_inputs(body["inputs"])
        raw_scores = flag(body, "raw_scores")
        if body.get("truncate") is not None:
            flag(body, "truncate")
        _truncation_direction(body)
        servable = self._model(body.get("model"), PREDICT_PATH, is_classifier, "a classifier")
        pairs = "text_pair" in servable.input_specs["serving_default"]
        for index, sequence in enumerate(sequences):
            if (len(sequence) == 2) != pairs:
                raise bad_request(f"'inputs'[{index}] is {'a pair' if len(sequence) == 2 else 'one text'}; the "
                                  f"model '{servable.name}' takes {'pairs [text, text_pair]' if pairs else 'one text'}"
                                  ".", "inputs")
        inputs = {"text": np.array([sequence[0].encode("utf-8") for sequence in sequences], dtype=object)}
        if pairs:
            inputs["text_pair"] = np.array([sequence[1].encode("utf-8") for sequence in sequences], dtype=object)
        key = "logits" if raw_scores else "probabilities"
        if key not in servable.signature_defs["serving_default"].outputs:
            raise bad_request(f"The model '{servable.name}' gives no logits; leave 'raw_scores' out.", "raw_scores")
        scores = run_in_batches(self.predictor, servable, "serving_default", inputs, deadline, record)[key]
        labels = label_names(servable, scores.shape[-1])
        answers = [sorted(({"score": float(score), "label": label} for score, label in zip(row, labels)),
                          key=lambda entry: -entry["score"]) for row in np.asarray(scores, np.float64)]
        return answers if batched else answers[0]

    def rerank(self, body, deadline: float | None = None, record=None) -> list:
        """Answers `POST /rerank`: texts by the cross-encoder's score, best first."""
        body = request_object(body, {"query", "texts", "raw_scores", "return_text", "truncate",
                                     "truncation_direction", "model"}, {"query", "texts"},
                              '{"query": "who was Marie Curie?", "texts": ["Marie Curie was ...", "It rained."]}')
        query = body["query"]
        if not isinstance(query, str) or not query:
            raise bad_request(f"'query' must be a non-empty string; got {json.dumps(query)[:40]}.", "query")
        raw_scores, return_text = flag(body, "raw_scores"), flag(body, "return_text")
        if body.get("truncate") is not None:
            flag(body, "truncate")
        _truncation_direction(body)
        servable = self._model(body.get("model"), RERANK_PATH, is_reranker,
                               "a re-ranker (a cross-encoder: kbert-finetune --task=rerank)")
        texts = text_list(body["texts"], "texts", allow_single=False)
        inputs = {"query": np.array([query.encode("utf-8")] * len(texts), dtype=object),
                  "document": np.array([text.encode("utf-8") for text in texts], dtype=object)}
        scores = run_in_batches(self.predictor, servable, "serving_default", inputs, deadline, record)["score"]
        scores = np.asarray(scores, dtype=np.float64)
        if not raw_scores:
            scores = 1.0 / (1.0 + np.exp(-scores))
        order = sorted(range(len(texts)), key=lambda i: -float(scores[i]))  # stable: ties keep request order
        answer = []
        for i in order:
            entry = {"index": i, "score": float(scores[i])}
            if return_text:
                entry["text"] = texts[i]
            answer.append(entry)
        return answer

    def tokenize(self, body, deadline: float | None = None, record=None) -> list:
        """Answers `POST /tokenize`: each text's tokens, with the model's special tokens unless asked not to."""
        body = request_object(body, {"inputs", "add_special_tokens", "prompt_name", "model"}, {"inputs"},
                              '{"inputs": ["a gorgeous film"]}')
        texts = text_list(body["inputs"], "inputs", allow_single=True)
        special_tokens = flag(body, "add_special_tokens", default=True)
        _no_prompt(body)
        servable = self._model(body.get("model"), TOKENIZE_PATH, lambda s: s.tokenize is not None,
                               "a model whose export has its tokenizer (re-export older ones)")
        if record is not None:
            record.servable(servable, "tokenize")
        tokens = self._tokens(servable, texts, deadline)
        answer = []
        for row in range(len(texts)):
            listed = []
            for column in range(int(tokens["num_tokens"][row])):
                special = bool(tokens["special"][row, column])
                if special and not special_tokens:
                    continue
                start, stop = int(tokens["starts"][row, column]), int(tokens["ends"][row, column])
                listed.append({"id": int(tokens["token_ids"][row, column]),
                               "text": tokens["texts"][row, column].decode("utf-8", "replace"),
                               "special": special,
                               "start": None if special else start, "stop": None if special else stop})
            answer.append(listed)
        return answer

    def info(self) -> dict:
        """Answers `GET /info`: TEI's `Info` of the model its routes answer without a name."""
        servable = self._model(None, INFO_PATH, lambda s: True, "a model")
        export = servable.export_info
        quantization = export.get("quantization") or {}
        return {
            "model_id": servable.name,
            "model_sha": None,
            "model_dtype": quantization.get("format") or "float32",
            "served_model_name": servable.name,
            "model_type": self._model_type(servable),
            "max_concurrent_requests": self.predictor.limits.max_concurrent_requests,
            "max_input_length": servable.truncation_length or export.get("max_seq_length")
            or (export.get("task_config") or {}).get("max_seq_length") or 0,
            "max_batch_tokens": self.max_batch_tokens,
            "max_batch_requests": None,
            "max_client_batch_size": MAX_INPUTS,
            "auto_truncate": True,
            "tokenization_workers": 0,  # the tokenizer runs inside the model's graph
            "version": _kbert_version(),
            "sha": None,
            "docker_label": None,
        }

    @staticmethod
    def _model_type(servable) -> dict:
        if embedding_signature(servable) is not None:
            return {"embedding": {"pooling": servable.export_info.get("pooling") or "unknown"}}
        if is_reranker(servable):
            return {"reranker": {"id2label": {"0": "score"}, "label2id": {"score": 0}}}
        if is_classifier(servable):
            outputs = servable.signature_defs["serving_default"].outputs["probabilities"].tensor_shape.dim
            labels = label_names(servable, outputs[-1].size if outputs and outputs[-1].size > 0 else 0)
            return {"classifier": {"id2label": {str(i): label for i, label in enumerate(labels)},
                                   "label2id": {label: i for i, label in enumerate(labels)}}}
        return {servable.export_info.get("model_type") or "other": {}}

    def health(self) -> tuple[int, dict | None]:
        """Answers `GET /health`: `(200, None)` when every model serves, else 503 naming those that do not."""
        missing = self.predictor.manager.unavailable_models()
        if not missing:
            return 200, None
        return 503, {"error": f"unhealthy: no version loaded of {', '.join(sorted(missing))}",
                     "error_type": "Unhealthy"}


def _kbert_version() -> str:
    try:
        return metadata.version("kbert-tf")
    except metadata.PackageNotFoundError:
        return "unknown"

