"""kbert-serve under requests meant to hurt it: limits, slow connections, deep JSON, busy ports, retries.

One kbert-serve subprocess (small limits, a short REST timeout) serves the whole
module; the deadline, concurrency and byte-budget tests use a `ModelServer` in
this process, so they can see its budget and log.
"""

import json
import logging
import os
import shutil
import socket
import time
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2
from tensorflow_serving.apis import prediction_service_pb2_grpc

from kbert.serving.process import free_port
from tests import forked_python
from tests import serving_testlib as lib

MAX_BATCH = 16
MAX_TEXT = 4096
MAX_REQUEST = 1 << 20
MAX_CONNECTIONS = 320
SLOW_CONNECTIONS = 300


@pytest.fixture(scope="module")
def exported():
    return lib.exported_models()


@pytest.fixture(scope="module")
def server(exported, tmp_path_factory):
    root = tmp_path_factory.mktemp("hardening")
    half = root / "half"
    shutil.copytree(exported["sst2"]["version_dir"], half / "1")
    config = "model_config_list {\n" + "".join(
        f'  config {{ name: "{name}" base_path: "{exported[name]["export_dir"]}" }}\n' for name in ("sst2", "ner")
    ) + f'  config {{ name: "half" base_path: "{half}" }}\n}}\n'
    (root / "models.config").write_text(config)
    process = lib.start_server([
        f"--model_config_file={root / 'models.config'}", "--file_system_poll_wait_seconds=0.25",
        f"--max_batch_size={MAX_BATCH}", f"--max_text_bytes={MAX_TEXT}", f"--max_request_bytes={MAX_REQUEST}",
        f"--rest_api_max_connections={MAX_CONNECTIONS}",
        "--rest_api_num_threads=4",
        # An hour: a retry seen in this module can only come from the files changing.
        "--load_retry_interval_micros=3600000000"])
    process.half_dir = half
    yield process
    process.stop()


@pytest.fixture(scope="module")
def stub(server):
    channel = grpc.insecure_channel(server.grpc_address)
    yield prediction_service_pb2_grpc.PredictionServiceStub(channel)
    channel.close()


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


def _post(url, body, timeout=60):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def _grpc_error(stub, request, timeout=60):
    with pytest.raises(grpc.RpcError) as error:
        stub.Predict(request, timeout=timeout)
    return error.value.code(), error.value.details()


def _good(server, stub):
    """One normal request by each protocol; both must succeed."""
    status, payload = _post(f"{server.rest_url}/v1/models/sst2:predict", {"instances": ["a gorgeous film"]})
    assert status == 200, payload
    response = stub.Predict(_request("sst2", {"text": _strings(["a gorgeous film"])}), timeout=60)
    assert tf.make_ndarray(response.outputs["label"]).shape == (1,)


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


def test_slow_connections_hold_no_threads_and_leave_normal_requests_answered(server, stub):
    _good(server, stub)
    before = _threads(server.process.pid)
    slow = []
    try:
        for _ in range(SLOW_CONNECTIONS):  # each announces a 1 MB body and sends none of it
            sock = socket.create_connection(("127.0.0.1", server.rest_port), timeout=60)
            sock.sendall(b"POST /v1/models/sst2:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
            slow.append(sock)
        for _ in range(8):
            _good(server, stub)
        # The 300 are read by one event loop: at most the REST pool's 4 threads appeared.
        assert _threads(server.process.pid) <= before + 4

        # Past --rest_api_max_connections, a new connection gets 503 at once (not a hang).
        extra, refused = [], None
        for _ in range(MAX_CONNECTIONS):
            sock = socket.create_connection(("127.0.0.1", server.rest_port), timeout=60)
            extra.append(sock)
            sock.sendall(b"GET /v1/models/sst2 HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = sock.recv(4096)
            if reply.startswith(b"HTTP/1.1 503"):
                refused = reply
                break
        assert refused is not None and len(extra) <= MAX_CONNECTIONS - SLOW_CONNECTIONS + 1
        assert b"--rest_api_max_connections=320" in refused and b'{"error": ' in refused
        for sock in extra:
            sock.close()
    finally:
        for sock in slow:
            sock.close()
    _wait_for_closed_connections(server)
    _good(server, stub)


def _wait_for_closed_connections(server, seconds: float = 60.0) -> None:
    """Waits until the server's event loop has seen the closed sockets (503 until it has).

    Closing 300 sockets on our side is instant; the server counts a connection
    until its loop reads the close, which on a loaded machine can lag. Meanwhile
    it answers 503 at once and closes, which can also reach us as a broken pipe
    or a reset while we are still sending the body.
    """
    deadline = time.monotonic() + seconds
    while True:
        try:
            status, _ = _post(f"{server.rest_url}/v1/models/sst2:predict",
                              {"instances": ["a gorgeous film"]})
        except ConnectionError:  # a reset while reading the reply: refused as above
            status = 503
        except urllib.error.URLError as e:  # urllib wraps a broken pipe while sending
            if not isinstance(e.reason, ConnectionError):
                raise
            status = 503
        if status != 503 or time.monotonic() > deadline:
            return
        time.sleep(0.2)


def test_batch_over_max_batch_size_is_refused_naming_the_flag(server, stub):
    texts = ["word"] * 10_000
    code, details = _grpc_error(stub, _request("sst2", {"text": _strings(texts)}))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "batch of 10000 examples, over the limit of 16 (--max_batch_size)" in details
    status, payload = _post(f"{server.rest_url}/v1/models/sst2:predict", {"instances": texts})
    assert status == 400 and "over the limit of 16 (--max_batch_size)" in payload["error"]
    response = stub.Predict(_request("sst2", {"text": _strings(texts[:MAX_BATCH])}), timeout=60)
    assert tf.make_ndarray(response.outputs["label"]).shape == (MAX_BATCH,)


def test_text_over_max_text_bytes_is_refused_naming_the_flag(server, stub):
    long_text = "é" * (MAX_TEXT // 2) + "x"  # 4097 UTF-8 bytes
    code, details = _grpc_error(stub, _request("ner", {"text": _strings(["short", long_text])}))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.endswith("input 'text' example [1] is 4097 bytes, over the limit of 4096 bytes per string "
                            "(--max_text_bytes).")
    status, payload = _post(f"{server.rest_url}/v1/models/ner:predict", {"instances": [long_text]})
    assert status == 400 and "(--max_text_bytes)" in payload["error"]
    response = stub.Predict(_request("ner", {"text": _strings(["é" * (MAX_TEXT // 2)])}), timeout=60)
    assert tf.make_ndarray(response.outputs["num_words"]).tolist() == [1]


def test_request_over_max_request_bytes_is_refused_before_its_body_is_read(server):
    sock = socket.create_connection(("127.0.0.1", server.rest_port), timeout=60)
    with sock:
        sock.sendall(f"POST /v1/models/sst2:predict HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_REQUEST + 1}"
                     "\r\n\r\n".encode())
        reply = sock.recv(4096).decode()
    assert reply.startswith("HTTP/1.1 413")
    assert json.loads(reply.split("\r\n\r\n", 1)[1]) == {
        "error": f"Request of {MAX_REQUEST + 1} bytes is over --max_request_bytes={MAX_REQUEST}."}


def test_runtime_op_failure_keeps_the_ops_message(server, stub):
    inputs = {"token_ids": np.array([[101, 99999, 102]], "int32"), "segment_ids": np.zeros((1, 3), "int32"),
              "padding_mask": np.ones((1, 3), "int32")}
    code, details = _grpc_error(stub, _request("sst2", inputs, signature="serve_ids"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("sst2 version 1 signature 'serve_ids' rejected the input values: "
                              "indices[0,1] = 99999 is not in [0, 3003) (node ")
    assert "Graph execution error" not in details
    status, payload = _post(f"{server.rest_url}/v1/models/sst2:predict", {
        "signature_name": "serve_ids", "inputs": {k: v.tolist() for k, v in inputs.items()}})
    assert status == 400 and "indices[0,1] = 99999 is not in [0, 3003)" in payload["error"]


@pytest.mark.parametrize("depth", [200_000, 5_000, 900, 60])
@pytest.mark.parametrize("model", ["sst2", "serve_ids"])
def test_deep_json_gets_400(server, stub, depth, model):
    inner = "[" * depth + "]" * depth
    signature = '"signature_name": "serve_ids", ' if model == "serve_ids" else ""
    body = ('{' + signature + '"instances": ' + inner + '}').encode()
    status, payload = _post(f"{server.rest_url}/v1/models/sst2:predict", body)
    assert status == 400, payload
    assert set(payload) == {"error"}
    if depth > 1000:
        assert payload["error"].startswith("Malformed JSON request body: nested deeper than kbert-serve reads")
    _good(server, stub)


def test_chunked_body_is_read(server):
    request = urllib.request.Request(f"{server.rest_url}/v1/models/sst2:predict", method="POST",
                                     data=iter([b'{"instances": ', b'["a gorgeous film"]}']),
                                     headers={"Transfer-Encoding": "chunked"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        assert reply.status == 200 and len(json.load(reply)["predictions"]) == 1


def _status(server, name):
    with urllib.request.urlopen(f"{server.rest_url}/v1/models/{name}", timeout=30) as reply:
        return {int(s["version"]): s for s in json.load(reply)["model_version_status"]}


def _wait_for(condition, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.25)
    raise AssertionError("condition not met within the time limit")


def test_half_copied_version_is_served_once_complete_without_restart(server, stub, exported):
    source = exported["sst2"]["version_dir"]
    target = server.half_dir / "2"
    target.mkdir()
    shutil.copy(os.path.join(source, "saved_model.pb"), target)  # as cp -r / gsutil may: the graph first
    failed = _wait_for(lambda: _status(server, "half").get(2) if _status(server, "half").get(2, {}).get(
        "state") == "END" else None)
    message = failed["status"]["error_message"]
    assert failed["status"]["error_code"] != "OK"
    assert f"Loading {target} failed (attempt 1; retrying in 3600 s" in message
    assert "as soon as a file under it changes" in message and "variables" in message
    response = stub.Predict(_request("half", {"text": _strings(["a"])}), timeout=60)
    assert response.model_spec.version.value == 1  # the old version serves meanwhile

    for name in sorted(os.listdir(source)):  # the rest of the copy arrives
        if name != "saved_model.pb":
            copy = shutil.copytree if os.path.isdir(os.path.join(source, name)) else shutil.copy
            copy(os.path.join(source, name), target / name)
    _wait_for(lambda: _status(server, "half").get(2, {}).get("state") == "AVAILABLE")
    response = stub.Predict(_request("half", {"text": _strings(["a"])}), timeout=60)
    assert response.model_spec.version.value == 2


def _run_binary(args):
    env = dict(os.environ, PYTHONPATH=lib.REPO, TF_CPP_MIN_LOG_LEVEL="3")
    return forked_python.run(["-m", "kbert.bin.serve", *args], env=env, cwd=lib.REPO, timeout=300)


@pytest.mark.parametrize("protocol", ["gRPC", "REST"])
def test_busy_port_is_one_line_and_exit_status_2(exported, protocol):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        ports = [f"--port={busy}", f"--rest_api_port={free_port()}"] if protocol == "gRPC" else [
            f"--port={free_port()}", f"--rest_api_port={busy}"]
        result = _run_binary([*ports, "--model_name=sst2", f"--model_base_path={exported['sst2']['export_dir']}"])
    flag = "--port" if protocol == "gRPC" else "--rest_api_port"
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]  # (run as python -m, the program is named serve.py)
    assert f"error: cannot listen on 127.0.0.1:{busy} ({protocol}): Address already in use" in last
    assert last.lower().endswith(f"pass another {flag}.")
    assert "Traceback" not in result.stderr and "Failed to add port" not in result.stderr
    assert result.stdout == ""


# ---- In this process: deadlines, concurrency and the byte budget, seen from inside. ----

@pytest.fixture(scope="module")
def inproc(exported):
    from kbert.serving import BatchingParameters
    from kbert.serving import Limits
    from kbert.serving import ModelServer
    from kbert.serving.model_config import ModelConfig

    # A 30 s batch timeout holds a lone request in the queue: long enough for any deadline here.
    server = ModelServer([ModelConfig("sst2", exported["sst2"]["export_dir"])], port=0,
                         rest_api_port=free_port(), poll_wait_seconds=0,
                         batching=BatchingParameters(max_batch_size=8, batch_timeout_micros=30_000_000,
                                                     num_batch_threads=1),
                         limits=Limits(max_request_bytes=1 << 20, max_concurrent_request_bytes=2 << 20),
                         grpc_max_concurrent_rpcs=1, rest_api_timeout_in_ms=2000)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    server.stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    yield server
    channel.close()
    server.stop()


def test_expired_request_is_not_run_and_concurrency_is_bounded(inproc, caplog):
    caplog.set_level(logging.DEBUG, logger="kbert.serving")
    alone = _request("sst2", {"text": _strings(["a gorgeous film"])})
    waiting = inproc.stub.Predict.future(alone, timeout=5)  # queues for a batch that will not fill in time
    _wait_for(lambda: inproc.budget.used > 0 or waiting.done(), timeout=60)
    assert not waiting.done()
    code, details = _grpc_error(inproc.stub, alone)  # a second request while the first holds the one slot
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "Concurrent RPC limit exceeded" in details
    with pytest.raises(grpc.RpcError) as error:
        waiting.result()
    assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    _wait_for(lambda: "status=DEADLINE_EXCEEDED" in caplog.text, timeout=60)
    assert "status=OK" not in caplog.text  # it left the queue unrun
    _wait_for(lambda: inproc.budget.used == 0, timeout=60)
    full = _request("sst2", {"text": _strings(["a gorgeous film"] * 8)})  # a full batch runs at once
    assert tf.make_ndarray(inproc.stub.Predict(full, timeout=60).outputs["label"]).shape == (8,)


def test_passed_deadline_is_refused_before_the_model_runs(inproc):
    from kbert.serving.errors import ServingError

    with pytest.raises(ServingError) as error:
        inproc.predictor.predict("sst2", None, None, "", {"text": _strings(["a"] * 8)},
                                 deadline=time.monotonic() - 1)
    assert error.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "deadline passed before the model ran; it was not run" in error.value.message


def test_full_byte_budget_answers_unavailable_naming_the_flag(inproc):
    url = f"http://127.0.0.1:{inproc.rest_api_port}/v1/models/sst2:predict"
    full = {"instances": ["a gorgeous film"] * 8}
    inproc.budget.take(inproc.budget.capacity)  # as if other requests held it all
    try:
        status, payload = _post(url, full)
        assert status == 503
        assert payload["error"].endswith(f"would pass --max_concurrent_request_bytes={2 << 20}. Retry later.")
        code, details = _grpc_error(inproc.stub, _request("sst2", {"text": _strings(full["instances"])}))
        assert code == grpc.StatusCode.UNAVAILABLE and "--max_concurrent_request_bytes" in details
    finally:
        inproc.budget.give(inproc.budget.capacity)
    assert _post(url, full)[0] == 200
    _wait_for(lambda: inproc.budget.used == 0, timeout=60)  # given back as the answer leaves


def test_connection_that_never_sends_its_body_or_headers_is_closed_after_the_timeout(inproc):
    port = inproc.rest_api_port
    no_body = socket.create_connection(("127.0.0.1", port), timeout=60)
    no_body.sendall(b"POST /v1/models/sst2:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
    half_headers = socket.create_connection(("127.0.0.1", port), timeout=60)
    half_headers.sendall(b"POST /v1/models/sst2:predict HTTP/1.1\r\nHost: x\r\n")
    with no_body, half_headers:  # --rest_api_timeout_in_ms=2000 here: the server hangs up, answering nothing
        assert no_body.recv(4096) == b""
        assert half_headers.recv(4096) == b""


# ---- Pieces on their own. ----

def test_limits_refuse_inconsistent_settings():
    from kbert.serving import Limits

    with pytest.raises(ValueError, match=r"--max_concurrent_request_bytes=10 is below --max_request_bytes=20"):
        Limits(max_request_bytes=20, max_concurrent_request_bytes=10)
    with pytest.raises(ValueError, match=r"--max_batch_size=0; it must be positive"):
        Limits(max_batch_size=0)
    Limits().check_inputs({"text": np.array([b"x" * 1_000_000], dtype=object)})  # a 1 MB text passes


def test_failed_version_is_retried_on_the_timer_up_to_the_limit(tmp_path):
    from kbert.serving.model_config import ModelConfig
    from kbert.serving.model_manager import ModelManager

    version = tmp_path / "1"
    (version / "variables").mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"not a SavedModel")
    manager = ModelManager([ModelConfig("m", str(tmp_path))], poll_wait_seconds=0, max_num_load_retries=2,
                           load_retry_interval_seconds=0)

    def message():
        return manager.status("m")[0].error_message

    manager.poll()
    assert "(attempt 1; retrying in 0 s" in message()
    manager.poll()
    assert "(attempt 2; retrying in 0 s" in message()
    manager.poll()
    assert "(attempt 3; no more timed retries (--max_num_load_retries=2); retrying when a file under it " \
           "changes)" in message()
    manager.poll()
    assert "(attempt 3;" in message()  # no fourth try while the files stay the same
    (version / "variables" / "variables.index").write_bytes(b"arrived")
    manager.poll()
    assert "(attempt 4; retrying in 0 s" in message()
    assert manager.status("m")[0].state == "END" and manager.loaded_versions("m") == []

    waiting = ModelManager([ModelConfig("m", str(tmp_path))], poll_wait_seconds=0, load_retry_interval_seconds=3600)
    waiting.poll()
    waiting.poll()
    assert "(attempt 1; retrying in 3600 s" in waiting.status("m")[0].error_message


def test_op_error_cause_keeps_the_ops_lines():
    from kbert.serving.errors import op_error_cause

    message = ("Graph execution error:\n\nDetected at node model/embedding/GatherV2 defined at (most recent call "
               "last):\n<stack traces unavailable>\nindices[0,1] = 99999 is not in [0, 3003)\n\t "
               "[[{{node model/embedding/GatherV2}}]] [Op:__inference_signature_wrapper_1523]")
    assert op_error_cause(message) == "indices[0,1] = 99999 is not in [0, 3003) (node model/embedding/GatherV2)"
    traced = ("Graph execution error:\n\nDetected at node 'n' defined at (most recent call last):\n"
              "  File \"a.py\", line 3, in f\n    y = g()\nNode: 'n'\nfirst line\nsecond line\nthird line\n"
              "\t [[{{node n}}]]")
    assert op_error_cause(traced) == "first line second line (node n)"
    assert op_error_cause("plain message [Op:Slice]") == "plain message [Op:Slice]"
