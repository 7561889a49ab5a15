"""kbert-serve's encoder APIs: OpenAI's /v1/embeddings, TEI's /rerank, TF Serving's Classify/Regress/MultiInference.

One server (batching on, small limits) serves an embedding model, a classifier,
a pair regressor and a cross-encoder for the whole module. Every answer is
checked against the same server's Predict, and every bad request gets a 4xx
with a message while the server keeps serving. The metrics endpoint's counters
are checked to move with this traffic.
"""

import base64
import json
import math
import re
import urllib.error
import urllib.request
from types import SimpleNamespace

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import classification_pb2
from tensorflow_serving.apis import inference_pb2
from tensorflow_serving.apis import predict_pb2
from tensorflow_serving.apis import prediction_service_pb2_grpc
from tensorflow_serving.apis import regression_pb2

from tests import serving_testlib as lib

from kbert.serving.encoder_apis import embedding_signature
from kbert.serving.encoder_apis import is_reranker

MAX_BATCH = 8
MAX_TEXT_BYTES = 2000
MAX_REQUEST_BYTES = 64 * 1024
DOCUMENTS = ["Marie Curie won two Nobel prizes.", "It rained all day in Paris.", "bad",
             "Curie was a physicist and chemist.", "one two three four five six seven eight nine ten eleven"]


def _export_reranker(root: str) -> str:
    """A tiny cross-encoder (`--task=rerank`'s model type), exported; returns its export dir."""
    import keras

    from kbert.checkpoints import TaskConfig
    from kbert.checkpoints import save_finetuned
    from kbert.export.saved_model import export_saved_model
    from kbert.models import BertClassifier
    from kbert.models import BertEncoder

    keras.utils.set_random_seed(5)
    encoder = BertEncoder(**lib.tiny_encoder_kwargs(vocabulary_size=lib.vocab_size(), max_sequence_length=32))
    config = TaskConfig(task="rerank", task_name="beir", model_type="cross_encoder", text_pair=True,
                        max_seq_length=32)
    model_dir = f"{root}/finetuned/rerank"
    save_finetuned(model_dir, BertClassifier(encoder, 1), config, lib.VOCAB)
    export_dir = f"{root}/export/rerank"
    export_saved_model(model_dir, export_dir, check=False)
    return export_dir


TICKET_LABELS = ["billing", "bug", "other"]


def _export_tickets(root: str) -> str:
    """A tiny multi-label classifier of users' own labels (`--task=classification`), exported."""
    import keras

    from kbert.checkpoints import TaskConfig
    from kbert.checkpoints import save_finetuned
    from kbert.export.saved_model import export_saved_model
    from kbert.models import BertClassifier
    from kbert.models import BertEncoder

    keras.utils.set_random_seed(6)
    encoder = BertEncoder(**lib.tiny_encoder_kwargs(vocabulary_size=lib.vocab_size(), max_sequence_length=32))
    config = TaskConfig(task="classification", task_name="tickets", model_type="classifier",
                        label_names=TICKET_LABELS, max_seq_length=32,
                        options={"problem_type": "multi_label", "threshold": 0.5,
                                 "text_column_names": ["text"], "label_column_name": "tags"})
    model_dir = f"{root}/finetuned/tickets"
    save_finetuned(model_dir, BertClassifier(encoder, 3), config, lib.VOCAB)
    export_dir = f"{root}/export/tickets"
    export_saved_model(model_dir, export_dir, check=False)
    return export_dir


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    exported = lib.exported_models()
    root = tmp_path_factory.mktemp("encoder-apis")
    dirs = {name: exported[name]["export_dir"] for name in ("embed", "sst2", "stsb")}
    dirs["rerank"] = _export_reranker(str(root))
    dirs["tickets"] = _export_tickets(str(root))
    (root / "models.config").write_text("model_config_list {\n" + "".join(
        f'  config {{ name: "{name}" base_path: "{path}" model_platform: "tensorflow" }}\n'
        for name, path in dirs.items()) + "}\n")
    (root / "batching.txt").write_text("max_batch_size { value: 8 }\nbatch_timeout_micros { value: 500 }\n"
                                       "num_batch_threads { value: 1 }\n")
    process = lib.start_server([f"--model_config_file={root / 'models.config'}", "--enable_batching",
                                f"--batching_parameters_file={root / 'batching.txt'}",
                                "--file_system_poll_wait_seconds=0", f"--max_batch_size={MAX_BATCH}",
                                f"--max_text_bytes={MAX_TEXT_BYTES}", f"--max_request_bytes={MAX_REQUEST_BYTES}"])
    yield process
    process.stop()


@pytest.fixture(scope="module")
def stub(server):
    channel = grpc.insecure_channel(server.grpc_address)
    yield prediction_service_pb2_grpc.PredictionServiceStub(channel)
    channel.close()


def _post(server, path, body):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(server.rest_url + path, data=data, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def _predict(stub, model, inputs):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    for key, values in inputs.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto([v.encode() for v in values]))
    response = stub.Predict(request, timeout=60)
    return {key: tf.make_ndarray(value) for key, value in response.outputs.items()}


def _version(export_info, signatures):
    """A version as the encoder APIs see it: its export's record, its signatures' inputs and outputs."""
    return SimpleNamespace(
        export_info=export_info,
        signature_defs={name: SimpleNamespace(outputs=dict.fromkeys(outputs))
                        for name, (_, outputs) in signatures.items()},
        input_specs={name: dict.fromkeys(inputs) for name, (inputs, _) in signatures.items()})


def test_which_api_a_version_answers_is_its_exports_record_else_its_signatures():
    embedder = {"serving_default": (["text"], ["embedding"]),
                "embeddings": (["text"], ["embedding", "num_tokens"])}
    older_embedder = {"serving_default": (["text"], ["embedding"])}
    reranker = {"serving_default": (["query", "document"], ["score"])}

    def recorded(*apis):
        return {"model_type": "classifier", "serving": {"encoder_apis": list(apis), "truncation_length": 32}}

    # Recorded: the record decides, whatever the signatures look like.
    assert embedding_signature(_version(recorded("embeddings"), embedder)) == "embeddings"
    assert embedding_signature(_version(recorded("embeddings"), older_embedder)) == "serving_default"
    assert embedding_signature(_version(recorded(), embedder)) is None
    assert is_reranker(_version(recorded("rerank"), reranker))
    assert not is_reranker(_version(recorded("embeddings"), reranker))
    # No record (exported before it, or not by kbert): what the signatures take and give.
    assert embedding_signature(_version({}, embedder)) == "embeddings"
    assert embedding_signature(_version({"model_type": "embedding"}, older_embedder)) == "serving_default"
    assert embedding_signature(_version({}, reranker)) is None
    assert is_reranker(_version({}, reranker)) and not is_reranker(_version({}, embedder))
    assert not is_reranker(_version({}, {"search": (["query"], ["ids"])}))


# ---- OpenAI's embeddings API, checked by a client written from its published schema ----

def _check_openai_embedding_response(body, count, model, encoding="float"):
    """The CreateEmbeddingResponse schema: every required field, its type, and nothing else."""
    assert set(body) == {"object", "data", "model", "usage"}
    assert body["object"] == "list" and body["model"] == model
    assert set(body["usage"]) == {"prompt_tokens", "total_tokens"}
    assert all(isinstance(v, int) and not isinstance(v, bool) for v in body["usage"].values())
    assert [item["index"] for item in body["data"]] == list(range(count))
    vectors = []
    for item in body["data"]:
        assert set(item) == {"object", "index", "embedding"} and item["object"] == "embedding"
        if encoding == "float":
            assert isinstance(item["embedding"], list) and all(isinstance(v, float) for v in item["embedding"])
            vectors.append(np.array(item["embedding"], np.float32))
        else:  # the openai client's own decoding: little-endian float32 bytes
            assert isinstance(item["embedding"], str)
            vectors.append(np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4"))
    return np.stack(vectors)


def test_embeddings_of_a_string_and_a_list_equal_predict_and_count_tokens(server, stub):
    status, single = _post(server, "/v1/embeddings", {"model": "embed", "input": lib.TEXTS[0]})
    assert status == 200
    vector = _check_openai_embedding_response(single, 1, "embed")
    status, listed = _post(server, "/v1/embeddings", {"model": "embed", "input": lib.TEXTS})
    assert status == 200
    vectors = _check_openai_embedding_response(listed, len(lib.TEXTS), "embed")
    expected = _predict(stub, "embed", {"text": lib.TEXTS})["embedding"]
    np.testing.assert_allclose(vectors, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(vector[0], expected[0], rtol=1e-5, atol=1e-6)
    # usage: the pieces each text was read as, [CLS] and [SEP] included (counted by Hugging Face's tokenizer).
    pieces = lib.reference_inputs(lib.TEXTS, None, 32)["padding_mask"].sum(axis=1)
    assert listed["usage"] == {"prompt_tokens": int(pieces.sum()), "total_tokens": int(pieces.sum())}
    assert single["usage"]["prompt_tokens"] == int(pieces[0])


def test_embeddings_base64_decodes_to_the_float_answer(server):
    body = {"model": "embed", "input": lib.TEXTS[:3]}
    _, as_float = _post(server, "/v1/embeddings", body)
    status, as_base64 = _post(server, "/v1/embeddings", {**body, "encoding_format": "base64"})
    assert status == 200
    np.testing.assert_array_equal(_check_openai_embedding_response(as_base64, 3, "embed", "base64"),
                                  _check_openai_embedding_response(as_float, 3, "embed"))
    assert as_base64["usage"] == as_float["usage"]


def test_unknown_model_is_404_in_openai_error_shape(server):
    status, body = _post(server, "/v1/embeddings", {"model": "text-embedding-3-small", "input": "hi"})
    assert status == 404
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["code"] == "model_not_found"
    assert body["error"]["param"] == "model" and "text-embedding-3-small" in body["error"]["message"]


@pytest.mark.parametrize("body, status, param, words", [
    ({"model": "embed", "input": []}, 400, "input", "non-empty list"),
    ({"model": "embed", "input": ""}, 400, "input", "empty string"),
    ({"model": "embed", "input": 42}, 400, "input", "a string or a non-empty list"),
    ({"model": "embed", "input": [[101, 2000, 102]]}, 400, "input", "Token ids are not accepted"),
    ({"model": "embed", "input": ["a", None]}, 400, "input", "not a string"),
    ({"input": "a"}, 400, "model", "Missing required argument(s): model"),
    ({"model": "embed", "input": "a", "encoding_format": "int8"}, 400, "encoding_format", "'float' or 'base64'"),
    ({"model": "embed", "input": "a", "dimensions": 7}, 400, "dimensions", "cannot shorten"),
    ({"model": "embed", "input": "a", "temperature": 1}, 400, "temperature", "Unrecognized request argument"),
    ({"model": "sst2", "input": "a"}, 400, "model", "does not embed text"),
    ({"model": "embed", "input": ["a"] * 2049}, 400, "input", "at most 2048 (OpenAI's limit)"),
    ({"model": "embed", "input": ["a" * (MAX_TEXT_BYTES + 1)]}, 400, None, "--max_text_bytes"),
    (b'{"model": "embed", "input": ', 400, None, "Malformed JSON"),
    (["not", "an", "object"], 400, None, "JSON object"),
])
def test_bad_embedding_requests_get_a_4xx_in_openai_shape(server, body, status, param, words):
    got, answer = _post(server, "/v1/embeddings", body)
    assert got == status, answer
    error = answer["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert words in error["message"] and error["param"] == param


def test_oversized_body_is_413_in_openai_shape_and_the_server_keeps_serving(server):
    status, answer = _post(server, "/v1/embeddings", {"model": "embed", "input": "x" * MAX_REQUEST_BYTES})
    assert status == 413 and "--max_request_bytes" in answer["error"]["message"]
    assert _post(server, "/v1/embeddings", {"model": "embed", "input": "still serving"})[0] == 200


# ---- TEI's rerank API ----

def test_rerank_orders_by_the_cross_encoders_score(server, stub):
    query = "who was Marie Curie?"
    raw = _predict(stub, "rerank", {"query": [query] * len(DOCUMENTS), "document": DOCUMENTS})["score"]
    status, ranked = _post(server, "/rerank", {"query": query, "texts": DOCUMENTS, "raw_scores": True})
    assert status == 200
    assert [hit["index"] for hit in ranked] == sorted(range(len(DOCUMENTS)), key=lambda i: -raw[i])
    np.testing.assert_allclose([hit["score"] for hit in ranked], sorted(raw, reverse=True), rtol=1e-5, atol=1e-6)
    assert all(set(hit) == {"index", "score"} for hit in ranked)
    # TEI's default: the sigmoid of the raw score; return_text adds each text.
    status, ranked = _post(server, "/rerank", {"query": query, "texts": DOCUMENTS, "return_text": True,
                                               "model": "rerank"})
    assert status == 200
    for hit in ranked:
        assert hit["text"] == DOCUMENTS[hit["index"]]
        assert hit["score"] == pytest.approx(1 / (1 + math.exp(-float(raw[hit["index"]]))), rel=1e-5)


@pytest.mark.parametrize("body, status, words", [
    ({"query": "q", "texts": []}, 400, "non-empty list"),
    ({"query": "q", "texts": "one text"}, 400, "non-empty list"),
    ({"query": "", "texts": ["a"]}, 400, "'query' must be a non-empty string"),
    ({"texts": ["a"]}, 400, "Missing required argument(s): query"),
    ({"query": "q", "texts": ["a", 3]}, 400, "not a string"),
    ({"query": "q", "texts": ["a"], "raw_scores": "yes"}, 400, "true or false"),
    ({"query": "q", "texts": ["a"], "model": "embed"}, 400, "not a re-ranker"),
    ({"query": "q", "texts": ["a"], "model": "nope"}, 404, "does not exist"),
    ({"query": "q", "texts": ["a"] * 2049}, 400, "at most 2048"),
    ({"query": "q", "texts": ["a"], "truncation_direction": "left"}, 400, "cuts texts from the right"),
    ({"query": "q" * (MAX_TEXT_BYTES + 1), "texts": ["a"]}, 400, "--max_text_bytes"),
])
def test_bad_rerank_requests_get_a_4xx_in_tei_shape(server, body, status, words):
    got, answer = _post(server, "/rerank", body)
    assert got == status, answer
    assert set(answer) == {"error", "error_type"} and words in answer["error"]
    assert answer["error_type"] == "Validation"
    assert _post(server, "/rerank", {"query": "q", "texts": ["a"]})[0] == 200


def test_more_texts_than_max_batch_size_run_in_batches_with_the_same_answers(server, stub):
    texts = [f"{lib.TEXTS[i % len(lib.TEXTS)]} {i}" for i in range(3 * MAX_BATCH - 3)]
    status, answer = _post(server, "/v1/embeddings", {"model": "embed", "input": texts})
    assert status == 200
    expected = np.concatenate([_predict(stub, "embed", {"text": texts[i:i + MAX_BATCH]})["embedding"]
                               for i in range(0, len(texts), MAX_BATCH)])
    np.testing.assert_allclose(_check_openai_embedding_response(answer, len(texts), "embed"), expected,
                               rtol=1e-5, atol=1e-6)


# What the official openai client (3.57) sends for `client.embeddings.create(model=..., input=[...])` and
# `client.models.list()`, recorded from it on loopback: the suite replays it without installing the client.
OPENAI_CLIENT_HEADERS = {
    "Accept-Encoding": "gzip, deflate", "authorization": "Bearer sk-anything", "accept": "application/json",
    "content-type": "application/json", "user-agent": "OpenAI/Python 3.57.0", "x-stainless-lang": "python",
    "x-stainless-package-version": "3.57.0", "x-stainless-os": "Linux", "x-stainless-arch": "x64",
    "x-stainless-runtime": "CPython", "x-stainless-runtime-version": "3.11.7", "x-stainless-async": "false",
    "x-stainless-retry-count": "0", "x-stainless-read-timeout": "600"}


def _as_openai_client(server, path, body=None):
    headers = dict(OPENAI_CLIENT_HEADERS)
    if body is None:
        headers.pop("content-type")
    request = urllib.request.Request(server.rest_url + path, headers=headers, method="GET" if body is None else "POST",
                                     data=None if body is None else json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=120) as reply:
        return reply.status, json.load(reply)


def test_the_openai_clients_own_requests_are_answered_in_its_shapes(server, stub):
    # LangChain's OpenAIEmbeddings sends 1,000 texts a request (its chunk_size); the client asks for base64.
    texts = [f"text number {i}" for i in range(1000)]
    status, answer = _as_openai_client(server, "/v1/embeddings",
                                       {"model": "embed", "input": texts, "encoding_format": "base64"})
    assert status == 200
    vectors = _check_openai_embedding_response(answer, len(texts), "embed", "base64")
    np.testing.assert_allclose(vectors[-MAX_BATCH:], _predict(stub, "embed", {"text": texts[-MAX_BATCH:]})["embedding"],
                               rtol=1e-5, atol=1e-6)
    status, listed = _as_openai_client(server, "/v1/models")
    assert status == 200 and listed["object"] == "list"
    assert [model["id"] for model in listed["data"]] == ["embed", "sst2", "stsb", "rerank", "tickets"]
    for model in listed["data"]:  # the openai client's Model: id, created (int), object "model", owned_by
        assert set(model) == {"id", "created", "object", "owned_by"} and model["object"] == "model"
        assert isinstance(model["created"], int) and model["created"] > 1_600_000_000
    status, one = _as_openai_client(server, "/v1/models/embed")  # client.models.retrieve("embed")
    assert status == 200 and {key: one[key] for key in listed["data"][0]} == listed["data"][0]
    assert one["model_version_status"][0]["state"] == "AVAILABLE"  # TF Serving's status, in the same answer
    status, versioned = _post_get(server, "/v1/models/embed/versions/1")
    assert status == 200 and set(versioned) == {"model_version_status"}


def _post_get(server, path):
    try:
        with urllib.request.urlopen(server.rest_url + path, timeout=60) as reply:
            raw = reply.read()
            return reply.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


# ---- TEI's embed, predict, tokenize, info and health ----

def test_tei_embed_is_the_models_vector_l2_normalized_unless_asked_not_to(server):
    _, openai = _post(server, "/v1/embeddings", {"model": "embed", "input": lib.TEXTS})
    raw = _check_openai_embedding_response(openai, len(lib.TEXTS), "embed")
    status, vectors = _post(server, "/embed", {"inputs": lib.TEXTS})  # the only embedding model answers
    assert status == 200 and len(vectors) == len(lib.TEXTS)
    np.testing.assert_allclose(vectors, raw / np.linalg.norm(raw, axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    status, single = _post(server, "/embed", {"inputs": lib.TEXTS[0], "normalize": False, "truncate": True,
                                              "truncation_direction": "Right", "model": "embed"})
    assert status == 200 and len(single) == 1
    np.testing.assert_allclose(single[0], raw[0], rtol=1e-5, atol=1e-6)


def test_tei_embed_with_truncate_false_refuses_a_text_over_the_models_length(server):
    long_text = " ".join(["word"] * 40)  # 40 pieces + [CLS] and [SEP]; the model reads 32
    pieces = len(lib.hf_tokenizer().encode(long_text).ids)
    status, answer = _post(server, "/embed", {"inputs": ["short", long_text], "truncate": False})
    assert status == 400 and answer["error_type"] == "Validation"
    assert f"`inputs` must have less than 32 tokens. Given: {pieces} (inputs[1])" in answer["error"]
    assert _post(server, "/embed", {"inputs": ["short"], "truncate": False})[0] == 200
    assert _post(server, "/embed", {"inputs": [long_text]})[0] == 200  # cut, as TEI's --auto-truncate does


def test_tei_predict_gives_every_labels_probability_highest_first(server, stub):
    expected = _predict(stub, "sst2", {"text": lib.TEXTS})
    status, batch = _post(server, "/predict", {"inputs": [[text] for text in lib.TEXTS], "model": "sst2"})
    assert status == 200 and len(batch) == len(lib.TEXTS)
    for row, probabilities in zip(batch, expected["probabilities"]):
        assert [entry["score"] for entry in row] == sorted((entry["score"] for entry in row), reverse=True)
        by_label = {entry["label"]: entry["score"] for entry in row}
        np.testing.assert_allclose([by_label["negative"], by_label["positive"]], probabilities, rtol=1e-5)
    status, single = _post(server, "/predict", {"inputs": lib.TEXTS[0], "raw_scores": True, "model": "sst2"})
    assert status == 200 and {entry["label"] for entry in single} == {"negative", "positive"}
    by_label = {entry["label"]: entry["score"] for entry in single}
    np.testing.assert_allclose([by_label["negative"], by_label["positive"]], expected["logits"][0], rtol=1e-5)


def test_tei_tokenize_gives_the_models_pieces_with_byte_offsets(server):
    tokenizer = lib.hf_tokenizer()
    status, answer = _post(server, "/tokenize", {"inputs": lib.TEXTS, "model": "embed"})
    assert status == 200 and len(answer) == len(lib.TEXTS)
    for text, tokens in zip(lib.TEXTS, answer):
        encoding = tokenizer.encode(text)
        assert [token["id"] for token in tokens] == encoding.ids
        assert [token["special"] for token in tokens] == [True] + [False] * (len(tokens) - 2) + [True]
        assert tokens[0] == {"id": lib.CLS, "text": "[CLS]", "special": True, "start": None, "stop": None}
        raw = text.encode("utf-8")
        for token, (start, stop) in zip(tokens[1:-1], encoding.offsets[1:-1]):
            # Hugging Face counts characters; TEI's start/stop slice the text's bytes.
            assert (token["start"], token["stop"]) == (len(text[:start].encode()), len(text[:stop].encode()))
            assert token["text"] == raw[token["start"]:token["stop"]].decode("utf-8")
    status, bare = _post(server, "/tokenize", {"inputs": lib.TEXTS[1], "add_special_tokens": False,
                                               "model": "sst2"})
    assert status == 200 and [token["id"] for token in bare[0]] == tokenizer.encode(lib.TEXTS[1]).ids[1:-1]


@pytest.mark.parametrize("path, body, words", [
    ("/tokenize", {"inputs": "a"}, "this server has 5 that /tokenize can run (embed, rerank, sst2, stsb, tickets)"),
    ("/embed", {"inputs": "a", "model": "sst2"}, "is not an embedding model"),
    ("/embed", {"inputs": "a", "prompt_name": "query"}, "kbert exports have none"),
    ("/embed", {"inputs": [1, 2]}, "Token ids are not accepted"),
    ("/embed", {"inputs": "a", "normalize": "yes"}, "true or false"),
    ("/predict", {"inputs": ["a", "b"], "model": "sst2"}, "takes one text"),
    ("/predict", {"inputs": ["a", "b", "c"], "model": "sst2"}, "a list of 3 strings"),
    ("/predict", {"inputs": [["a"], []], "model": "sst2"}, "holds 0 strings"),
    ("/predict", {"inputs": "a", "model": "stsb"}, "is not a classifier"),
    ("/predict", {"text": "a"}, "Unrecognized request argument"),
    ("/predict", {"inputs": "a"}, "this server has 2 that /predict can run (sst2, tickets)"),
])
def test_bad_tei_requests_get_a_4xx_in_teis_shape(server, path, body, words):
    status, answer = _post(server, path, body)
    assert status == 400 and set(answer) == {"error", "error_type"}, answer
    assert words in answer["error"] and answer["error_type"] == "Validation"


def test_tei_info_names_the_model_its_routes_answer_and_health_is_200(server):
    status, answer = _post_get(server, "/info")  # four models and no --tei_model: which one is unknown
    assert status == 400 and "Name the model" in answer["error"]
    assert _post_get(server, "/health") == (200, None)


# ---- TF Serving's Classify, Regress and MultiInference with tf.Examples ----

def _examples(input_proto, rows, context=None):
    target = input_proto.example_list_with_context if context else input_proto.example_list
    for row in rows:
        example = target.examples.add()
        for key, value in row.items():
            example.features.feature[key].bytes_list.value.append(value.encode())
    if context:
        for key, value in context.items():
            target.context.features.feature[key].bytes_list.value.append(value.encode())


def test_classify_with_tf_examples_equals_predict(server, stub):
    expected = _predict(stub, "sst2", {"text": lib.TEXTS})["probabilities"]
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name = "sst2"
    _examples(request.input, [{"text": text} for text in lib.TEXTS])
    response = stub.Classify(request, timeout=60)
    assert (response.model_spec.name, response.model_spec.version.value) == ("sst2", 1)
    assert response.model_spec.signature_name == "serving_default"
    got = [[(c.label, c.score) for c in row.classes] for row in response.result.classifications]
    assert [[label for label, _ in row] for row in got] == [["negative", "positive"]] * len(lib.TEXTS)
    np.testing.assert_allclose([[score for _, score in row] for row in got], expected, rtol=1e-5, atol=1e-6)
    status, rest = _post(server, "/v1/models/sst2/versions/1:classify",
                         {"examples": [{"text": text} for text in lib.TEXTS]})
    assert status == 200 and set(rest) == {"result"}
    assert [[label for label, _ in row] for row in rest["result"]] == [["negative", "positive"]] * len(lib.TEXTS)
    np.testing.assert_allclose([[score for _, score in row] for row in rest["result"]], expected, rtol=1e-5,
                               atol=1e-6)


def test_a_users_multi_label_classifier_answers_classify_with_its_label_names(server, stub):
    predicted = _predict(stub, "tickets", {"text": lib.TEXTS})
    probabilities = predicted["probabilities"]
    assert probabilities.shape == (len(lib.TEXTS), 3)
    # Each class on its own (sigmoid), not a softmax over them.
    assert not np.allclose(probabilities.sum(axis=1), 1.0)
    for row, labels in zip(probabilities, predicted["labels"]):
        over = sorted((name for name, p in zip(TICKET_LABELS, row) if p >= 0.5),
                      key=lambda name: -row[TICKET_LABELS.index(name)])
        assert [label.decode() for label in labels if label] == over
    assert any(label for labels in predicted["labels"] for label in labels)  # some reach 0.5
    status, answer = _post(server, "/v1/models/tickets:classify",
                           {"examples": [{"text": text} for text in lib.TEXTS]})
    assert status == 200
    assert [[label for label, _ in row] for row in answer["result"]] == [TICKET_LABELS] * len(lib.TEXTS)
    np.testing.assert_allclose([[score for _, score in row] for row in answer["result"]], probabilities,
                               rtol=1e-5, atol=1e-6)


def test_regress_with_tf_examples_and_a_context_feature_equals_predict(server, stub):
    pair = lib.PAIRS[0]
    expected = _predict(stub, "stsb", {"text": lib.TEXTS, "text_pair": [pair] * len(lib.TEXTS)})["score"]
    request = regression_pb2.RegressionRequest()
    request.model_spec.name = "stsb"
    _examples(request.input, [{"text": text} for text in lib.TEXTS], context={"text_pair": pair})
    response = stub.Regress(request, timeout=60)
    np.testing.assert_allclose([r.value for r in response.result.regressions], expected, rtol=1e-5, atol=1e-6)
    status, rest = _post(server, "/v1/models/stsb:regress",
                         {"context": {"text_pair": pair}, "examples": [{"text": text} for text in lib.TEXTS]})
    assert status == 200
    np.testing.assert_allclose(rest["result"], expected, rtol=1e-5, atol=1e-6)
    # A re-ranker regresses too: its inputs are the features `query` and `document`.
    request = regression_pb2.RegressionRequest()
    request.model_spec.name = "rerank"
    _examples(request.input, [{"query": "who", "document": d} for d in DOCUMENTS[:2]])
    scores = _predict(stub, "rerank", {"query": ["who"] * 2, "document": DOCUMENTS[:2]})["score"]
    np.testing.assert_allclose([r.value for r in stub.Regress(request, timeout=60).result.regressions], scores,
                               rtol=1e-5, atol=1e-6)


def test_multi_inference_runs_classify_tasks_and_names_what_it_supports(stub):
    request = inference_pb2.MultiInferenceRequest()
    task = request.tasks.add()
    task.model_spec.name = "sst2"
    task.method_name = "tensorflow/serving/classify"
    _examples(request.input, [{"text": text} for text in lib.TEXTS[:2]])
    response = stub.MultiInference(request, timeout=60)
    classify = classification_pb2.ClassificationRequest()
    classify.model_spec.name = "sst2"
    classify.input.CopyFrom(request.input)
    assert len(response.results) == 1
    assert response.results[0].classification_result == stub.Classify(classify, timeout=60).result
    task.method_name = "tensorflow/serving/predict"
    with pytest.raises(grpc.RpcError) as error:
        stub.MultiInference(request, timeout=60)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "tensorflow/serving/classify" in error.value.details()
    assert "tensorflow/serving/regress" in error.value.details()


def _bad_classify(stub, model, build, method="Classify"):
    request = (classification_pb2.ClassificationRequest() if method == "Classify"
               else regression_pb2.RegressionRequest())
    request.model_spec.name = model
    build(request.input)
    with pytest.raises(grpc.RpcError) as error:
        getattr(stub, method)(request, timeout=60)
    return error.value


def _int_feature(input_proto):
    input_proto.example_list.examples.add().features.feature["text"].int64_list.value.append(3)


def _two_values(input_proto):
    feature = input_proto.example_list.examples.add().features.feature["text"]
    feature.bytes_list.value.extend([b"a", b"b"])


@pytest.mark.parametrize("model, build, method, words", [
    ("sst2", lambda i: None, "Classify", "Input is empty"),
    ("sst2", lambda i: _examples(i, [{"sentence": "a"}]), "Classify", "no feature 'text'"),
    ("sst2", _int_feature, "Classify", "int64_list"),
    ("sst2", _two_values, "Classify", "has 2 values"),
    ("stsb", lambda i: _examples(i, [{"text": "a", "text_pair": "b"}]), "Classify", "Use Regress"),
    ("sst2", lambda i: _examples(i, [{"text": "a"}]), "Regress", "Use Classify"),
    ("sst2", lambda i: _examples(i, [{"text": "a"}] * (MAX_BATCH + 1)), "Classify", "--max_batch_size"),
    ("sst2", lambda i: _examples(i, [{"text": "a" * (MAX_TEXT_BYTES + 1)}]), "Classify", "--max_text_bytes"),
])
def test_bad_classify_and_regress_requests_are_invalid_argument(stub, model, build, method, words):
    error = _bad_classify(stub, model, build, method)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and words in error.details()


@pytest.mark.parametrize("path, body, status, words", [
    ("/v1/models/sst2:classify", {"examples": []}, 400, "non-empty list"),
    ("/v1/models/sst2:classify", {"examples": [{"text": 3}]}, 400, "must be one string"),
    ("/v1/models/sst2:classify", {"examples": ["a"]}, 400, "must be an object"),
    ("/v1/models/sst2:classify", {"instances": ["a"]}, 400, "Unknown key(s) ['instances']"),
    ("/v1/models/nope:regress", {"examples": [{"text": "a"}]}, 404, "nope"),
])
def test_bad_rest_classify_and_regress_get_a_4xx(server, path, body, status, words):
    got, answer = _post(server, path, body)
    assert got == status and words in answer["error"]
    assert _post(server, "/v1/models/sst2:classify", {"examples": [{"text": "a"}]})[0] == 200


# ---- Prometheus metrics ----

def _metrics(server) -> dict:
    with urllib.request.urlopen(server.rest_url + "/monitoring/prometheus/metrics", timeout=30) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain")
        text = reply.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def _sample(samples, name, **labels):
    """The sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    for key, value in samples.items():
        if not key.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', key))
        if all(found.get(k) == v for k, v in labels.items()):
            total += value
    return total


def test_metrics_counters_move_with_traffic(server, stub):
    before = _metrics(server)
    for _ in range(3):
        assert _post(server, "/v1/embeddings", {"model": "embed", "input": lib.TEXTS[:2]})[0] == 200
    assert _post(server, "/v1/embeddings", {"model": "embed", "input": []})[0] == 400
    _predict(stub, "sst2", {"text": lib.TEXTS})
    assert _post(server, "/v1/embeddings", {"model": "embed", "input": "x" * MAX_REQUEST_BYTES})[0] == 413
    after = _metrics(server)

    def moved(name, **labels):
        return _sample(after, name, **labels) - _sample(before, name, **labels)

    ok = dict(model="embed", version="1", signature="embeddings", api="embeddings", entrypoint="rest")
    assert moved("kbert_serving_requests_total", **ok, status="OK") == 3
    assert moved("kbert_serving_requests_total", api="embeddings", status="INVALID_ARGUMENT") == 1
    assert moved("kbert_serving_request_latency_seconds_count", **ok) == 3
    assert moved("kbert_serving_request_latency_seconds_bucket", **ok, le="+Inf") == 3
    assert moved("kbert_serving_request_examples_total", model="embed", api="embeddings") == 6
    assert moved("kbert_serving_requests_total", model="sst2", api="predict", entrypoint="grpc", status="OK") == 1
    # Each request ran as a batch of its own (nothing else was in flight): sizes 2, 2, 2 and 4.
    assert moved("kbert_serving_batch_size_count", model="embed", signature="embeddings") == 3
    assert moved("kbert_serving_batch_size_sum", model="embed", signature="embeddings") == 6
    assert moved("kbert_serving_batch_size_sum", model="sst2", signature="serving_default") == len(lib.TEXTS)
    assert moved("kbert_serving_refusals_total", reason="RESOURCE_EXHAUSTED", entrypoint="rest") == 1
    assert after["kbert_serving_queued_examples"] == 0
