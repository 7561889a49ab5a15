"""What an operator runs kbert-serve with: TLS, an API key, gRPC health, config reload, labels, warm-up.

One kbert-serve subprocess serves the module with everything on: a TLS gRPC
port that requires a client certificate (a self-signed one made here with
`cryptography`), `--api_key`, `--enable_grpc_healthcheck_service`,
`--model_config_file_poll_wait_seconds`, `--tei_model`, and warm-up (on by
default). Clients are real: TF Serving's gRPC stubs over TLS, the health
method by its full name, plain HTTP. The label, reload and warm-up rules are
also checked in this process, where the manager's state can be seen.
"""

import datetime
import ipaddress
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
from grpc_health.v1 import health_pb2
from tensorflow_serving.apis import get_model_status_pb2
from tensorflow_serving.apis import model_service_pb2_grpc
from tensorflow_serving.apis import predict_pb2
from tensorflow_serving.apis import prediction_service_pb2_grpc

from kbert.serving.errors import ServingError
from tests import forked_python
from tests import serving_testlib as lib

API_KEY = "test-key-0123"
KEY = [("authorization", f"Bearer {API_KEY}")]
HEALTH_CHECK = "/grpc.health.v1.Health/Check"


def _self_signed(directory) -> tuple[bytes, bytes]:
    """A key and a self-signed certificate for localhost / 127.0.0.1, usable as its own CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


def _config(entries: dict) -> str:
    """A ModelServerConfig: name -> (base_path, {label: version})."""
    lines = []
    for name, (path, labels) in entries.items():
        label_text = "".join(f' version_labels {{ key: "{k}" value: {v} }}' for k, v in labels.items())
        lines.append(f'  config {{ name: "{name}" base_path: "{path}"{label_text} }}\n')
    return "model_config_list {\n" + "".join(lines) + "}\n"


def _write_atomically(path, text: str) -> None:
    with open(f"{path}.tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(f"{path}.tmp", path)


@pytest.fixture(scope="module")
def exported():
    return lib.exported_models()


@pytest.fixture(scope="module")
def server(exported, tmp_path_factory):
    root = tmp_path_factory.mktemp("operations")
    key, cert = _self_signed(root)
    # SSLConfig holds the PEM text itself, as TF Serving's does.
    (root / "ssl.config").write_text(f"server_key: {json.dumps(key.decode())}\n"
                                     f"server_cert: {json.dumps(cert.decode())}\n"
                                     f"custom_ca: {json.dumps(cert.decode())}\nclient_verify: true\n")
    config_file = root / "models.config"
    config_file.write_text(_config({"sst2": (exported["sst2"]["export_dir"], {}),
                                    "embed": (exported["embed"]["export_dir"], {})}))
    process = lib.start_server([f"--model_config_file={config_file}", "--model_config_file_poll_wait_seconds=0.3",
                                "--file_system_poll_wait_seconds=0", "--enable_grpc_healthcheck_service",
                                f"--ssl_config_file={root / 'ssl.config'}", f"--api_key={API_KEY}",
                                "--tei_model=embed"])
    (root / "cert.pem").write_bytes(cert)
    (root / "key.pem").write_bytes(key)
    process.pem_files = {"cert": root / "cert.pem", "key": root / "key.pem"}
    process.config_file = config_file
    process.credentials = grpc.ssl_channel_credentials(root_certificates=cert, private_key=key,
                                                       certificate_chain=cert)
    process.ca = cert
    yield process
    process.stop()


def _channel(server, credentials=None):
    options = [("grpc.ssl_target_name_override", "localhost")]
    return grpc.secure_channel(server.grpc_address, credentials or server.credentials, options=options)


@pytest.fixture(scope="module")
def channel(server):
    channel = _channel(server)
    yield channel
    channel.close()


def _predict_request(model: str, texts: list[str], pairs: list[str] | None = None) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.inputs["text"].CopyFrom(tf.make_tensor_proto(np.array(texts, dtype=object)))
    if pairs is not None:
        request.inputs["text_pair"].CopyFrom(tf.make_tensor_proto(np.array(pairs, dtype=object)))
    return request


def _http(server, path, body=None, key=API_KEY):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.rest_url + path, data=data, headers=headers,
                                     method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            status, raw, headers = reply.status, reply.read(), reply.headers
    except urllib.error.HTTPError as e:
        status, raw, headers = e.code, e.read(), e.headers
    is_json = headers.get("Content-Type", "").startswith("application/json")
    return status, json.loads(raw) if raw and is_json else None, headers


def _health(channel, service: str):
    check = channel.unary_unary(HEALTH_CHECK, request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                                response_deserializer=health_pb2.HealthCheckResponse.FromString)
    return check(health_pb2.HealthCheckRequest(service=service), timeout=10).status


def test_start_logs_no_warning_the_user_cannot_act_on(server):
    log = server.log_text()
    assert "unsaved custom gradients" not in log
    assert not [line for line in log.splitlines() if line.startswith(("W", "WARNING"))], log
    assert "replayed" in log and "warm-up requests" in log  # the exports' warm-up ran before serving


def test_grpc_health_by_full_method_name_over_tls_needs_no_key(channel):
    for service in ("", "ModelService", "PredictionService"):
        assert _health(channel, service) == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.RpcError) as error:
        _health(channel, "NoSuchService")
    assert error.value.code() == grpc.StatusCode.NOT_FOUND


def test_tls_refuses_plaintext_and_clients_without_the_cas_certificate(server, channel):
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    answer = stub.Predict(_predict_request("sst2", ["a gorgeous film"]), timeout=30, metadata=KEY)
    assert answer.outputs["probabilities"].tensor_shape.dim[1].size == 2
    others = [grpc.insecure_channel(server.grpc_address),
              _channel(server, grpc.ssl_channel_credentials(root_certificates=server.ca))]  # no client cert
    for other in others:
        with pytest.raises(grpc.RpcError) as error:
            prediction_service_pb2_grpc.PredictionServiceStub(other).Predict(
                _predict_request("sst2", ["a"]), timeout=10, metadata=KEY)
        assert error.value.code() == grpc.StatusCode.UNAVAILABLE
        other.close()


def test_the_repositorys_grpc_client_speaks_tls_with_a_client_certificate_and_the_key(server):
    port = server.grpc_address.rsplit(":", 1)[1]
    args = ["serving/client.py", f"--server=localhost:{port}", "--model_name=sst2", "--text", "a gorgeous film",
            f"--ssl_root_cert={server.pem_files['cert']}", f"--ssl_client_cert={server.pem_files['cert']}",
            f"--ssl_client_key={server.pem_files['key']}"]
    env = dict(os.environ, PYTHONPATH=lib.REPO, TF_CPP_MIN_LOG_LEVEL="3")
    result = forked_python.run([*args, f"--api_key={API_KEY}"], cwd=lib.REPO, env=env, timeout=120)
    assert result.returncode == 0 and result.stdout.startswith("label="), result.stderr[-2000:]
    result = forked_python.run(args, cwd=lib.REPO, env=env, timeout=120)
    assert result.returncode == 1 and "UNAUTHENTICATED" in result.stderr


def test_api_key_guards_every_route_but_the_health_checks(server, channel):
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    for metadata in (None, [("authorization", "Bearer wrong")], [("authorization", API_KEY)]):
        with pytest.raises(grpc.RpcError) as error:
            stub.Predict(_predict_request("sst2", ["a"]), timeout=10, metadata=metadata)
        assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "Bearer <key>" in error.value.details()
    shapes = {"/v1/models/sst2:predict": ({"instances": ["a"]}, lambda e: isinstance(e["error"], str)),
              "/v1/embeddings": ({"model": "embed", "input": "a"}, lambda e: e["error"]["code"] == "invalid_api_key"),
              "/embed": ({"inputs": "a"}, lambda e: set(e) == {"error", "error_type"}),
              "/v1/models": (None, lambda e: e["error"]["type"] == "invalid_request_error"),
              "/v1/models/sst2": (None, lambda e: isinstance(e["error"], str))}
    for path, (body, right_shape) in shapes.items():
        for key in (None, "wrong"):
            status, answer, headers = _http(server, path, body, key=key)
            assert status == 401 and right_shape(answer), (path, answer)
            assert headers["WWW-Authenticate"].startswith("Bearer")
        assert _http(server, path, body)[0] == 200, path
    assert _http(server, "/health", key=None)[:2] == (200, None)
    status, _, headers = _http(server, "/monitoring/prometheus/metrics", key=None)
    assert status == 200 and headers["Content-Type"].startswith("text/plain")


def test_tei_model_answers_the_routes_that_name_no_model(server):
    status, info, _ = _http(server, "/info")
    assert status == 200 and info["model_id"] == "embed" and info["max_input_length"] == 32
    assert info["model_type"] == {"embedding": {"pooling": "mean"}} and info["max_client_batch_size"] == 2048
    status, tokens, _ = _http(server, "/tokenize", {"inputs": "a film"})
    assert status == 200 and [token["text"] for token in tokens[0]] == ["[CLS]", "a", "film", "[SEP]"]
    status, answer, _ = _http(server, "/predict", {"inputs": "a film"})  # embed is not a classifier
    assert status == 400 and "is not a classifier" in answer["error"]
    status, answer, _ = _http(server, "/predict", {"inputs": "a film", "model": "sst2"})
    assert status == 200 and {entry["label"] for entry in answer} == {"negative", "positive"}


def _status(channel, model):
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = model
    stub = model_service_pb2_grpc.ModelServiceStub(channel)
    return stub.GetModelStatus(request, timeout=10, metadata=KEY)


def _wait(condition, timeout=90.0):
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting for the server")


def _served(channel, model) -> bool:
    try:
        return any(entry.state == entry.AVAILABLE for entry in _status(channel, model).model_version_status)
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.NOT_FOUND:
            return False
        raise


def test_config_file_reload_under_a_request_loop_has_zero_errors(server, channel, exported):
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    stop, counts, errors = threading.Event(), {"grpc": 0, "rest": 0}, []

    def loop_grpc():
        while not stop.is_set():
            try:
                stub.Predict(_predict_request("sst2", ["a gorgeous film"]), timeout=30, metadata=KEY)
                counts["grpc"] += 1
            except grpc.RpcError as e:
                errors.append(f"gRPC {e.code()}: {e.details()}")

    def loop_rest():
        while not stop.is_set():
            status, answer, _ = _http(server, "/v1/models/embed:predict", {"instances": ["a film"]})
            if status == 200:
                counts["rest"] += 1
            else:
                errors.append(f"REST {status}: {answer}")

    threads = [threading.Thread(target=loop_grpc), threading.Thread(target=loop_rest)]
    for thread in threads:
        thread.start()
    try:
        base = {"sst2": (exported["sst2"]["export_dir"], {}), "embed": (exported["embed"]["export_dir"], {})}
        # Add a model and label a version of an unchanged one.
        _write_atomically(server.config_file, _config({**base, "embed": (exported["embed"]["export_dir"],
                                                                          {"stable": 1}),
                                                       "mrpc": (exported["mrpc"]["export_dir"], {})}))
        _wait(lambda: _served(channel, "mrpc"))
        _wait(lambda: _http(server, "/v1/models/embed/labels/stable:predict", {"instances": ["a"]})[0] == 200)
        mrpc = stub.Predict(_predict_request("mrpc", ["He said so."], ["So he said."]), timeout=30, metadata=KEY)
        assert mrpc.model_spec.version.value == 1
        # A label naming a version that is not there: refused whole, nothing changes.
        _write_atomically(server.config_file, _config({**base, "mrpc": (exported["mrpc"]["export_dir"],
                                                                        {"next": 9})}))
        _wait(lambda: "names version 9, which is not on disk" in server.log_text(), timeout=30)
        assert _served(channel, "mrpc") and _http(server, "/v1/models/embed/labels/stable",
                                                  None)[0] == 200
        # Remove the added model.
        _write_atomically(server.config_file, _config(base))
        _wait(lambda: not _served(channel, "mrpc"))
        assert _health(channel, "") == health_pb2.HealthCheckResponse.SERVING
        time.sleep(0.5)  # requests keep flowing after the last reload
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert errors == [] and counts["grpc"] > 20 and counts["rest"] > 20, (errors[:5], counts)


# ---- In this process: the label rule, reloads that fail, warm-up records. ----

def test_a_dangling_version_label_stops_the_start_unless_allowed(exported):
    from kbert.serving import ModelServer
    from kbert.serving.model_config import ModelConfig

    configs = [ModelConfig("sst2", exported["sst2"]["export_dir"], version_labels={"stable": 1, "canary": 7})]
    with pytest.raises(ValueError, match=r"label 'canary' of model sst2 names version 7, which is not available "
                                         r"\(those are: \[1\]\); .*--allow_version_labels_for_unavailable_models"):
        ModelServer(configs, port=0, rest_api_port=0, poll_wait_seconds=0).start()
    server = ModelServer(configs, port=0, rest_api_port=0, poll_wait_seconds=0, allow_unavailable_labels=True)
    server.start()
    try:
        assert server.manager.get("sst2", label="stable").version == 1
        with pytest.raises(ServingError, match="Specific\\(sst2, 7\\)"):
            server.manager.get("sst2", label="canary")
    finally:
        server.stop()


def test_reloads_keep_tf_servings_label_rule_and_report_models_that_do_not_load(exported, tmp_path):
    from kbert.serving.model_config import ModelConfig
    from kbert.serving.model_manager import ModelManager
    from kbert.serving.predictor import Predictor
    from kbert.serving.tei_apis import TeiApis

    sst2 = exported["sst2"]["export_dir"]
    manager = ModelManager([ModelConfig("sst2", sst2, version_labels={"stable": 1})], poll_wait_seconds=0,
                           allow_unavailable_labels=True)
    manager.poll()
    # Allowed: a new label on a version not there. Refused even so: moving a label in use to one.
    manager.reconfigure([ModelConfig("sst2", sst2, version_labels={"stable": 1, "next": 2})])
    with pytest.raises(ServingError, match="label 'stable' .* a label in use moves only to an available version"):
        manager.reconfigure([ModelConfig("sst2", sst2, version_labels={"stable": 2})])
    assert manager.configs["sst2"].version_labels == {"stable": 1, "next": 2}
    # A new model with no version: the reload says so, the health check turns 503, sst2 serves on.
    (tmp_path / "empty").mkdir()
    with pytest.raises(ServingError, match="Model later has no loadable version") as error:
        manager.reconfigure([manager.configs["sst2"], ModelConfig("later", str(tmp_path / "empty"))])
    assert error.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert manager.unavailable_models() == ["later"] and manager.get("sst2").version == 1
    status, answer = TeiApis(Predictor(manager)).health()
    assert status == 503 and answer == {"error": "unhealthy: no version loaded of later", "error_type": "Unhealthy"}
    manager.stop()


def test_warm_up_replays_the_exports_records_and_a_bad_record_fails_the_load(exported, tmp_path):
    from tensorflow_serving.apis import prediction_log_pb2

    from kbert.serving.model_config import ModelConfig
    from kbert.serving.model_manager import ModelManager
    from kbert.serving.servable import Servable
    from kbert.serving.warmup import WARMUP_FILE
    from kbert.serving.warmup import replay_warmup

    embed = Servable("embed", 1, exported["embed"]["version_dir"])
    assert replay_warmup(embed, iterations=2) == 3  # embeddings, features, serving_default
    assert replay_warmup(embed, iterations=0) == 0
    broken = tmp_path / "broken"
    shutil.copytree(exported["sst2"]["version_dir"], broken / "1")
    record = prediction_log_pb2.PredictionLog()
    record.predict_log.request.model_spec.signature_name = "no_such_signature"
    with tf.io.TFRecordWriter(str(broken / "1" / WARMUP_FILE)) as writer:
        writer.write(record.SerializeToString())
    manager = ModelManager([ModelConfig("broken", str(broken))], poll_wait_seconds=0, warmup_iterations=1)
    manager.poll()
    status, = manager.status("broken")
    assert status.state == "END" and "no_such_signature" in status.error_message
    assert manager.loaded_versions("broken") == []
    cold = ModelManager([ModelConfig("broken", str(broken))], poll_wait_seconds=0, warmup_iterations=0)
    cold.poll()  # without warm-up the records are not read
    assert cold.loaded_versions("broken") == [1]


def test_ssl_config_errors_name_the_file_and_the_fix(tmp_path):
    from kbert.serving.access import read_ssl_config

    path = tmp_path / "ssl.config"
    cases = {"server_key: 'x'": "server_key and server_cert must hold PEM text",
             "not a proto {": "is not an SSLConfig text proto",
             ("server_key: '-----BEGIN PRIVATE KEY-----' server_cert: '-----BEGIN CERTIFICATE-----' "
              "client_verify: true"): "client_verify needs custom_ca"}
    for text, words in cases.items():
        path.write_text(text)
        with pytest.raises(ValueError, match=words):
            read_ssl_config(str(path))
    with pytest.raises(ValueError, match="--ssl_config_file=.*missing"):
        read_ssl_config(str(tmp_path / "missing"))
