"""kbert-serve as a subprocess on 127.0.0.1: gRPC and REST answers, bad requests, load, hot reload, SIGTERM.

One server serves every exported test model (with batching on) for the whole
module; the tests run in file order and the last one stops it with SIGTERM.
"""

import base64
import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import get_model_metadata_pb2
from tensorflow_serving.apis import get_model_status_pb2
from tensorflow_serving.apis import model_management_pb2
from tensorflow_serving.apis import model_service_pb2_grpc
from tensorflow_serving.apis import predict_pb2
from tensorflow_serving.apis import prediction_service_pb2_grpc

from tests import serving_testlib as lib

MODELS = list(lib.TASKS) + ["embed"]
MAX_REQUEST_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def exported():
    return lib.exported_models()


@pytest.fixture(scope="module")
def server(exported, tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    reload_dir = root / "reload"
    shutil.copytree(exported["sst2"]["version_dir"], reload_dir / "1")
    config = "model_config_list {\n" + "".join(
        f'  config {{ name: "{name}" base_path: "{exported[name]["export_dir"]}" model_platform: "tensorflow" }}\n'
        for name in MODELS) + f'  config {{ name: "reload" base_path: "{reload_dir}" }}\n}}\n'
    (root / "models.config").write_text(config)
    (root / "batching.txt").write_text("max_batch_size { value: 8 }\nbatch_timeout_micros { value: 1000 }\n"
                                       "num_batch_threads { value: 2 }\n")
    process = lib.start_server([f"--model_config_file={root / 'models.config'}", "--enable_batching",
                                f"--batching_parameters_file={root / 'batching.txt'}",
                                "--file_system_poll_wait_seconds=0.5",
                                f"--max_request_bytes={MAX_REQUEST_BYTES}"])
    process.reload_dir = reload_dir
    yield process
    process.stop()


@pytest.fixture(scope="module")
def stub(server):
    channel = grpc.insecure_channel(server.grpc_address)
    yield prediction_service_pb2_grpc.PredictionServiceStub(channel)
    channel.close()


@pytest.fixture(scope="module")
def in_process(exported):
    return {name: tf.saved_model.load(exported[name]["version_dir"]).signatures for name in MODELS}


def _request(model, inputs, signature="", version=None):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = version
    for key, value in inputs.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    return request


def _strings(values):
    return np.array([v.encode("utf-8") if isinstance(v, str) else v for v in values], dtype=object)


def _outputs(response):
    return {key: tf.make_ndarray(value) for key, value in response.outputs.items()}


def _assert_same(got, expected):
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        value = value.numpy()
        if value.dtype == object:
            assert got[key].tolist() == value.tolist(), key
        else:
            np.testing.assert_allclose(got[key], value, atol=1e-5, err_msg=key)


TASK_INPUTS = {
    "sst2": {"text": lib.TEXTS},
    "mrpc": {"text": lib.TEXTS, "text_pair": lib.PAIRS},
    "stsb": {"text": lib.TEXTS, "text_pair": lib.PAIRS},
    "ner": {"text": ["John lives in Zürich , Switzerland", "", lib.TEXTS[3]]},
    "squad": {"question": [lib.QUESTION, "Who?", "What?"], "context": [lib.CONTEXT, "Paris , France", ""]},
    "embed": {"text": lib.TEXTS},
}


def test_ready_line_names_every_model(server):
    assert lib.ready_versions(server.ready_line) == {name: [1] for name in MODELS + ["reload"]}
    assert server.ready_line.endswith(f"on 127.0.0.1:{server.grpc_port} (gRPC) and "
                                      f"127.0.0.1:{server.rest_port} (REST)")


@pytest.mark.parametrize("name", MODELS)
def test_predict_equals_the_in_process_model(stub, in_process, name):
    inputs = {key: _strings(values) for key, values in TASK_INPUTS[name].items()}
    response = stub.Predict(_request(name, inputs), timeout=60)
    assert (response.model_spec.name, response.model_spec.version.value,
            response.model_spec.signature_name) == (name, 1, "serving_default")
    expected = in_process[name]["serving_default"](**{k: tf.constant(v) for k, v in inputs.items()})
    _assert_same(_outputs(response), expected)


def test_serve_ids_equals_the_in_process_model(stub, in_process):
    inputs = lib.reference_inputs(lib.TEXTS, None, 32)
    response = stub.Predict(_request("sst2", inputs, signature="serve_ids"), timeout=60)
    _assert_same(_outputs(response), in_process["sst2"]["serve_ids"](**{k: tf.constant(v) for k, v in inputs.items()}))


def test_get_model_metadata_lists_the_signatures(stub, server):
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "mrpc"
    request.metadata_field.append("signature_def")
    response = stub.GetModelMetadata(request, timeout=30)
    signatures = get_model_metadata_pb2.SignatureDefMap()
    response.metadata["signature_def"].Unpack(signatures)
    assert sorted(signatures.signature_def) == ["serve_ids", "serving_default"]
    default = signatures.signature_def["serving_default"]
    assert sorted(default.inputs) == ["text", "text_pair"]
    assert sorted(default.outputs) == ["label", "logits", "probabilities"]
    assert default.inputs["text"].dtype == tf.string.as_datatype_enum
    with urllib.request.urlopen(f"{server.rest_url}/v1/models/mrpc/metadata", timeout=30) as reply:
        rest = json.load(reply)
    assert sorted(rest["metadata"]["signature_def"]["signature_def"]) == ["serve_ids", "serving_default"]


def test_model_status_by_grpc_and_rest(server):
    with grpc.insecure_channel(server.grpc_address) as channel:
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = "sst2"
        response = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(request, timeout=30)
    assert [(s.version, s.state) for s in response.model_version_status] == [
        (1, get_model_status_pb2.ModelVersionStatus.AVAILABLE)]
    with urllib.request.urlopen(f"{server.rest_url}/v1/models/sst2", timeout=30) as reply:
        answer = json.load(reply)
    assert answer.pop("model_version_status") == [
        {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}]
    # The same path is OpenAI's GET /v1/models/{id}: its model object shares the answer.
    assert answer == {"id": "sst2", "object": "model", "created": answer["created"], "owned_by": "kbert"}


def _post(server, path, body):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(server.rest_url + path, data=data, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def test_rest_row_and_columnar_formats(server, in_process):
    expected = in_process["mrpc"]["serving_default"](text=tf.constant(_strings(lib.TEXTS[:2])),
                                                     text_pair=tf.constant(_strings(lib.PAIRS[:2])))
    status, rows = _post(server, "/v1/models/mrpc:predict", {"instances": [
        {"text": t, "text_pair": p} for t, p in zip(lib.TEXTS[:2], lib.PAIRS[:2])]})
    assert status == 200
    assert [row["label"] for row in rows["predictions"]] == [v.decode() for v in expected["label"].numpy()]
    np.testing.assert_allclose([row["logits"] for row in rows["predictions"]], expected["logits"], atol=1e-5)
    status, columns = _post(server, "/v1/models/mrpc/versions/1:predict", {"signature_name": "serving_default",
                            "inputs": {"text": lib.TEXTS[:2], "text_pair": lib.PAIRS[:2]}})
    assert status == 200
    np.testing.assert_allclose(columns["outputs"]["probabilities"], expected["probabilities"], atol=1e-5)
    status, single = _post(server, "/v1/models/sst2:predict", {"instances": ["a gorgeous film"]})
    assert status == 200 and set(single["predictions"][0]) == {"label", "logits", "probabilities"}


GOOD = {"text": _strings(["a gorgeous film"])}


def _grpc_cases():
    long_text = "word " * 12000  # 60 kB: under the 64 kB limit, far over 32 tokens
    return [
        ("wrong dtype", _request("sst2", {"text": np.array([1, 2], "int32")}),
         grpc.StatusCode.INVALID_ARGUMENT, "input 'text' has dtype DT_INT32"),
        ("wrong shape", _request("sst2", {"text": _strings(["a", "b"]).reshape(1, 2)}),
         grpc.StatusCode.INVALID_ARGUMENT, "input 'text' has shape [1, 2]"),
        ("missing input", _request("mrpc", {"text": _strings(["a"])}),
         grpc.StatusCode.INVALID_ARGUMENT, "Missing but required: ['text_pair']"),
        ("extra input", _request("sst2", {"text": _strings(["a"]), "txt": _strings(["a"])}),
         grpc.StatusCode.INVALID_ARGUMENT, "Sent extra: ['txt']"),
        ("empty batch", _request("sst2", {"text": np.array([], dtype=object)}),
         grpc.StatusCode.INVALID_ARGUMENT, "input 'text' has an empty batch"),
        ("batch mismatch", _request("mrpc", {"text": _strings(["a", "b"]), "text_pair": _strings(["c"])}),
         grpc.StatusCode.INVALID_ARGUMENT, "inputs disagree on the batch size"),
        ("unknown signature", _request("sst2", GOOD, signature="classify_text"),
         grpc.StatusCode.INVALID_ARGUMENT, 'Serving signature name: "classify_text" not found'),
        ("token id outside the vocabulary", _request("sst2", {
            "token_ids": np.array([[101, 99999, 102]], "int32"), "segment_ids": np.zeros((1, 3), "int32"),
            "padding_mask": np.ones((1, 3), "int32")}, signature="serve_ids"),
         grpc.StatusCode.INVALID_ARGUMENT, "rejected the input values: indices[0,1] = 99999 is not in [0, 3003)"),
        ("unknown model", _request("sst3", GOOD), grpc.StatusCode.NOT_FOUND, "Servable not found for request: "
         "Latest(sst3)"),
        ("unknown version", _request("sst2", GOOD, version=9), grpc.StatusCode.NOT_FOUND,
         "Specific(sst2, 9)"),
        ("over max_request_bytes", _request("sst2", {"text": _strings(["x" * (MAX_REQUEST_BYTES + 10)])}),
         grpc.StatusCode.RESOURCE_EXHAUSTED, ""),
        ("invalid UTF-8", _request("sst2", {"text": np.array([b"bad \xff\xfe film"], dtype=object)}),
         grpc.StatusCode.OK, ""),
        ("very long string", _request("sst2", {"text": _strings([long_text])}), grpc.StatusCode.OK, ""),
    ]


@pytest.mark.parametrize("case", _grpc_cases(), ids=lambda case: case[0])
def test_bad_grpc_request_is_answered_and_the_next_one_succeeds(stub, in_process, case):
    _, request, code, message = case
    if code == grpc.StatusCode.OK:
        response = stub.Predict(request, timeout=60)
        text = tf.make_ndarray(request.inputs["text"])
        _assert_same(_outputs(response), in_process["sst2"]["serving_default"](text=tf.constant(text)))
    else:
        with pytest.raises(grpc.RpcError) as error:
            stub.Predict(request, timeout=60)
        assert error.value.code() == code
        assert message in error.value.details()
    good = stub.Predict(_request("sst2", GOOD), timeout=60)
    assert tf.make_ndarray(good.outputs["label"]).shape == (1,)


REST_CASES = [
    ("malformed JSON", "/v1/models/sst2:predict", b'{"instances": ["a"', 400, "Malformed JSON"),
    ("neither instances nor inputs", "/v1/models/sst2:predict", {"examples": ["a"]}, 400, "exactly one of"),
    ("empty instances", "/v1/models/sst2:predict", {"instances": []}, 400, "non-empty list"),
    ("number for text", "/v1/models/sst2:predict", {"instances": [3]}, 400, "expects strings"),
    ("missing pair", "/v1/models/mrpc:predict", {"instances": [{"text": "a"}]}, 400, "Missing: ['text_pair']"),
    ("ragged ids", "/v1/models/sst2:predict", {"signature_name": "serve_ids", "inputs": {
        "token_ids": [[101, 102], [101]], "segment_ids": [[0, 0], [0]], "padding_mask": [[1, 1], [1]]}},
     400, "input 'token_ids' expects int32 values of one shape"),
    ("unknown model", "/v1/models/nope:predict", {"instances": ["a"]}, 404, "Servable not found"),
    ("unknown version", "/v1/models/sst2/versions/4:predict", {"instances": ["a"]}, 404, "Specific(sst2, 4)"),
    ("too large", "/v1/models/sst2:predict", {"instances": ["x" * MAX_REQUEST_BYTES]}, 413,
     "over --max_request_bytes"),
    ("b64 invalid UTF-8", "/v1/models/sst2:predict",
     {"instances": [{"b64": base64.b64encode(b"bad \xff film").decode()}]}, 200, ""),
]


@pytest.mark.parametrize("case", REST_CASES, ids=lambda case: case[0])
def test_bad_rest_request_is_answered_and_the_next_one_succeeds(server, case):
    _, path, body, status, message = case
    got_status, payload = _post(server, path, body)
    assert got_status == status, payload
    if status != 200:
        assert set(payload) == {"error"} and message in payload["error"]
    assert _post(server, "/v1/models/sst2:predict", {"instances": ["a gorgeous film"]})[0] == 200


def test_8_threads_x_50_requests_without_errors(server, stub, in_process):
    texts = [f"{lib.TEXTS[i % 4]} {i}" for i in range(8)]
    expected = in_process["sst2"]["serving_default"](text=tf.constant(_strings(texts)))["logits"].numpy()
    errors, done = [], []

    def client(worker):
        for _ in range(50):
            try:
                response = stub.Predict(_request("sst2", {"text": _strings([texts[worker]])}), timeout=60)
                np.testing.assert_allclose(tf.make_ndarray(response.outputs["logits"])[0], expected[worker],
                                           atol=1e-5)
                done.append(1)
            except Exception as e:  # counted: the test wants zero
                errors.append(repr(e)[:200])

    threads = [threading.Thread(target=client, args=(worker,)) for worker in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert errors == [] and len(done) == 400


def _wait_for(condition, timeout=90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.25)
    raise AssertionError("condition not met within the time limit")


def _status(server, name):
    with urllib.request.urlopen(f"{server.rest_url}/v1/models/{name}", timeout=30) as reply:
        return {int(s["version"]): s for s in json.load(reply)["model_version_status"]}


def test_new_version_is_picked_up_and_a_corrupt_one_is_refused(server, stub, exported):
    staging = server.reload_dir / ".2.tmp"
    shutil.copytree(exported["mrpc"]["version_dir"], staging)  # a different model, so answers change
    os.rename(staging, server.reload_dir / "2")
    _wait_for(lambda: _status(server, "reload").get(2, {}).get("state") == "AVAILABLE")
    inputs = {"text": _strings(["a"]), "text_pair": _strings(["b"])}
    response = stub.Predict(_request("reload", inputs), timeout=60)
    assert response.model_spec.version.value == 2
    assert _status(server, "reload")[1]["state"] == "END"  # latest policy: version 1 unloaded

    corrupt = server.reload_dir / ".3.tmp"
    (corrupt / "variables").mkdir(parents=True)
    (corrupt / "saved_model.pb").write_bytes(b"this is not a SavedModel")
    os.rename(corrupt, server.reload_dir / "3")
    status = _wait_for(lambda: _status(server, "reload").get(3) if _status(server, "reload").get(3, {}).get(
        "state") == "END" else None)
    assert status["status"]["error_code"] != "OK" and "failed" in status["status"]["error_message"]
    response = stub.Predict(_request("reload", inputs), timeout=60)
    assert response.model_spec.version.value == 2  # the old version keeps serving


def _reload_request(entries: dict) -> model_management_pb2.ReloadConfigRequest:
    request = model_management_pb2.ReloadConfigRequest()
    for name, (path, labels) in entries.items():
        config = request.config.model_config_list.config.add(name=name, base_path=str(path),
                                                               model_platform="tensorflow")
        config.version_labels.update(labels)
    return request


def test_handle_reload_config_request_adds_and_removes_models_while_others_serve(server, stub, exported):
    models = model_service_pb2_grpc.ModelServiceStub(grpc.insecure_channel(server.grpc_address))
    served = {name: (exported[name]["export_dir"], {}) for name in MODELS}
    served["reload"] = (server.reload_dir, {})
    stop, answered, errors = threading.Event(), [0], []

    def loop():
        while not stop.is_set():
            try:
                stub.Predict(_request("sst2", GOOD), timeout=60)
                answered[0] += 1
            except grpc.RpcError as e:
                errors.append(f"{e.code()}: {e.details()}")

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        added = dict(served, copy=(exported["sst2"]["export_dir"], {"stable": 1}))
        response = models.HandleReloadConfigRequest(_reload_request(added), timeout=120)
        assert response.status.error_code == 0
        labelled = _request("copy", GOOD)
        labelled.model_spec.version_label = "stable"
        assert stub.Predict(labelled, timeout=60).model_spec.version.value == 1
        # Refused whole, nothing changed: a relative path, a label naming a version not on disk.
        for entries, code, words in (
                (dict(added, other=("relative/path", {})), grpc.StatusCode.INVALID_ARGUMENT, "absolute paths"),
                (dict(added, copy=(exported["sst2"]["export_dir"], {"stable": 4})),
                 grpc.StatusCode.FAILED_PRECONDITION, "names version 4, which is not on disk")):
            with pytest.raises(grpc.RpcError) as error:
                models.HandleReloadConfigRequest(_reload_request(entries), timeout=120)
            assert error.value.code() == code and words in error.value.details()
        assert stub.Predict(labelled, timeout=60).model_spec.version.value == 1
        models.HandleReloadConfigRequest(_reload_request(served), timeout=120)
        with pytest.raises(grpc.RpcError) as error:
            stub.Predict(_request("copy", GOOD), timeout=60)
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        stop.set()
        thread.join(timeout=60)
    assert errors == [] and answered[0] > 5, (errors[:3], answered)


def test_sigterm_stops_cleanly(server, stub):
    assert stub.Predict(_request("sst2", GOOD), timeout=60).outputs["label"]
    assert server.stop() == 0
    assert "kbert-serve: stopped" in server.stdout_tail
    assert "Traceback" not in server.log_text()
