"""The model server: models loaded and polled, gRPC and REST listening, clean shutdown."""

from __future__ import annotations

import logging
import os
import socket
import threading
from concurrent import futures

import grpc
from grpc_health.v1 import health
from grpc_health.v1 import health_pb2
from grpc_health.v1 import health_pb2_grpc
from tensorflow_serving.apis import model_service_pb2_grpc
from tensorflow_serving.apis import prediction_service_pb2_grpc

from kbert.serving.access import ApiKey
from kbert.serving.access import read_ssl_config
from kbert.serving.batching import BatchingParameters
from kbert.serving.batching import BatchScheduler
from kbert.serving.config_reload import ConfigReloader
from kbert.serving.limits import ByteBudget
from kbert.serving.limits import Limits
from kbert.serving.limits import RequestSlots
from kbert.serving.metrics import ServingMetrics
from kbert.serving.model_config import ModelConfig
from kbert.serving.model_manager import ModelManager
from kbert.serving.prediction_service import ModelServicer
from kbert.serving.prediction_service import PredictionServicer
from kbert.serving.predictor import Predictor
from kbert.serving.rest import RestApi
from kbert.serving.rest_server import RestServer

log = logging.getLogger("kbert.serving")

# The gRPC health services answered (`--enable_grpc_healthcheck_service`): the whole
# server (""), and the two service names TF Serving registers.
HEALTH_SERVICES = ("", "ModelService", "PredictionService")


class ModelServer:
    """TF Serving's protocol for kbert SavedModels: gRPC `PredictionService`/`ModelService` + REST.

    Both ports are bound before any model loads, so a port in use is reported
    at once. Requests are bounded everywhere one request could hurt the
    others: gRPC runs at most `grpc_max_concurrent_rpcs` at once (more get
    RESOURCE_EXHAUSTED before any thread is spent on them) and skips requests
    whose client deadline has passed; REST reads on one event loop with
    timeouts and a connection cap (`kbert.serving.rest_server`); `limits` caps
    batch size, string length, request size and the bytes all requests hold.

    Args:
        configs: list of `ModelConfig`, the models to serve.
        host: str. Address to bind. Defaults to "127.0.0.1" (this machine only).
        port: int. gRPC port; 0 picks a free one. Defaults to 8500.
        rest_api_port: int. REST port; 0 turns REST off (as in TF Serving).
            Defaults to 8501.
        poll_wait_seconds: float. Seconds between looks for new versions; 0
            looks once at start. Defaults to 1.
        batching: `BatchingParameters` or None. None runs each request alone.
        max_batch_tokens: int. With `batching`: most padded tokens in one
            merged batch (`--max_batch_tokens`; 0 counts examples only).
            Defaults to 0.
        limits: `Limits` or None (the defaults): `--max_batch_size`,
            `--max_text_bytes`, `--max_request_bytes`,
            `--max_concurrent_request_bytes`, `--max_concurrent_requests`.
        grpc_max_threads: int. gRPC requests run at once. Defaults to 64.
        grpc_max_concurrent_rpcs: int. gRPC requests accepted at once (running
            or waiting for a thread); more get RESOURCE_EXHAUSTED. Defaults to 128.
        rest_api_num_threads: int. REST requests run at once. Defaults to 16.
        rest_api_timeout_in_ms: int. Longest wait for a REST request's
            headers, its body, or a thread to run it. Defaults to 30000.
        rest_api_max_connections: int. Open REST connections past which new
            ones get 503. Defaults to 1000.
        max_num_load_retries: int. Timed retries of a version that failed to
            load. Defaults to 5.
        load_retry_interval_seconds: float. Seconds between them. Defaults to 60.
        indexes: dict or None. Index name -> `kbert.index.IndexSearcher`,
            searched over REST at `/v1/indexes/<name>:search`.
        use_onnxruntime: bool. Run a version's ONNX Runtime int8 model where it
            has one (`--onnxruntime`). Defaults to True.
        onnxruntime_threads: int. Threads one ONNX Runtime call may use
            (`--onnxruntime_intra_op_parallelism`); 0: with `batching`, the
            CPU count divided by its `num_batch_threads` (at least 1), else
            ONNX Runtime's choice (one per physical core).
        config_file: str or None. The `--model_config_file` `configs` came
            from, re-read every `config_poll_wait_seconds`.
        config_poll_wait_seconds: float. `--model_config_file_poll_wait_seconds`;
            0 reads the file at start only. Reload requests
            (`HandleReloadConfigRequest`) are taken either way.
        allow_unavailable_labels: bool. `--allow_version_labels_for_unavailable_models`:
            version labels may name versions that are not loaded; otherwise such a
            label stops the start (and a reload). Defaults to False.
        warmup_iterations: int. Replays of each warm-up request of a version
            before it serves (`--enable_model_warmup` x
            `--num_request_iterations_for_warmup`); 0: none. Defaults to 0.
        enable_grpc_healthcheck_service: bool. Answer `grpc.health.v1.Health`:
            SERVING while every model has a version loaded. Defaults to False.
        ssl_config_file: str or None. TF Serving's `SSLConfig` text proto: the
            gRPC port speaks TLS (`kbert.serving.access`).
        api_key: str or None. Requests must carry `Authorization: Bearer <key>`
            (gRPC: `authorization` metadata), health checks excepted.
        tei_model: str or None. The model TEI's routes answer when a request
            names none (`kbert.serving.tei_apis`).

    Example:

    >>> server = ModelServer([ModelConfig("sst2", "export/sst2")], limits=Limits(max_batch_size=64))
    >>> server.start()
    >>> server.wait()  # until server.stop() (e.g. from a SIGTERM handler)
    """

    def __init__(self, configs: list[ModelConfig], host: str = "127.0.0.1", port: int = 8500,
                 rest_api_port: int = 8501, poll_wait_seconds: float = 1.0,
                 batching: BatchingParameters | None = None, max_batch_tokens: int = 0,
                 limits: Limits | None = None,
                 grpc_max_threads: int = 64, grpc_max_concurrent_rpcs: int = 128, rest_api_num_threads: int = 16,
                 rest_api_timeout_in_ms: int = 30000, rest_api_max_connections: int = 1000,
                 max_num_load_retries: int = 5, load_retry_interval_seconds: float = 60.0,
                 indexes: dict | None = None, use_onnxruntime: bool = True,
                 onnxruntime_threads: int = 0, config_file: str | None = None,
                 config_poll_wait_seconds: float = 0.0, allow_unavailable_labels: bool = False,
                 warmup_iterations: int = 0, enable_grpc_healthcheck_service: bool = False,
                 ssl_config_file: str | None = None, api_key: str | None = None,
                 tei_model: str | None = None):
        for flag, value in (("grpc_max_threads", grpc_max_threads), ("grpc_max_concurrent_rpcs",
                            grpc_max_concurrent_rpcs), ("rest_api_num_threads", rest_api_num_threads),
                            ("rest_api_timeout_in_ms", rest_api_timeout_in_ms),
                            ("rest_api_max_connections", rest_api_max_connections)):
            if value < 1:
                raise ValueError(f"--{flag}={value}; it must be positive.")
        self.host = host
        self.port = port
        self.rest_api_port = rest_api_port
        self.limits = limits or Limits()
        self.grpc_max_threads = grpc_max_threads
        self.grpc_max_concurrent_rpcs = grpc_max_concurrent_rpcs
        self.rest_api_num_threads = rest_api_num_threads
        self.rest_api_timeout_in_ms = rest_api_timeout_in_ms
        self.rest_api_max_connections = rest_api_max_connections
        self.budget = ByteBudget(self.limits.max_concurrent_request_bytes)
        self.slots = RequestSlots(self.limits.max_concurrent_requests)
        self.indexes = dict(indexes or {})
        if self.indexes and not rest_api_port:
            raise ValueError("--index_dir is searched over REST; it needs --rest_api_port.")
        if onnxruntime_threads < 0:
            raise ValueError(f"--onnxruntime_intra_op_parallelism={onnxruntime_threads}; it must be "
                             "0 (ONNX Runtime's choice) or positive.")
        if tei_model is not None and tei_model not in {config.name for config in configs}:
            raise ValueError(f"--tei_model={tei_model} is not a served model; they are "
                             f"{', '.join(config.name for config in configs) or 'none'}.")
        self.tei_model = tei_model
        self.max_batch_tokens = max_batch_tokens
        self.credentials = read_ssl_config(ssl_config_file) if ssl_config_file else None
        self.api_key = ApiKey(api_key) if api_key is not None else None
        if onnxruntime_threads == 0 and batching is not None:
            # num_batch_threads batches run at once: one call's threads share the cores with
            # theirs instead of each taking them all (see BENCHMARKS.md, int8_batch_independence).
            onnxruntime_threads = max(1, (os.cpu_count() or 1) // batching.num_batch_threads)
        self.manager = ModelManager(configs, poll_wait_seconds, max_num_load_retries,
                                    load_retry_interval_seconds, use_onnxruntime,
                                    onnxruntime_threads, warmup_iterations, allow_unavailable_labels)
        self.health = health.HealthServicer() if enable_grpc_healthcheck_service else None
        self.reloader = ConfigReloader(self.manager, config_file, config_poll_wait_seconds,
                                       on_change=self._update_health)
        self.manager.after_poll = self._update_health
        self.scheduler = (BatchScheduler(batching, max_batch_tokens) if batching is not None
                          else None)
        # Prometheus metrics of this server (REST GET /monitoring/prometheus/metrics); each
        # batch is recorded by the predictor's batch runner.
        self.metrics = ServingMetrics()
        if self.scheduler is not None:
            self.metrics.track_queue(self.scheduler.queued_examples)
        self.predictor = Predictor(self.manager, self.scheduler, self.limits, self.metrics)
        self._grpc = None
        self._rest = None
        self._stopped = threading.Event()

    def start(self) -> None:
        """Binds the ports, loads the models (failing if one has no loadable version), then listens.

        Raises:
            ValueError: a port is in use, or a model has no loadable version.
        """
        self._bind()
        try:
            self.manager.poll()
            empty = [name for name in self.manager.configs if not self.manager.loaded_versions(name)]
            if empty:
                details = "; ".join(
                    f"{name}: {self.manager.configs[name].base_path}"
                    + "".join(f" (version {s.version}: {s.error_message})"
                              for s in self._statuses(name) if s.error_message)
                    for name in empty)
                raise ValueError(f"no loadable version for {details}. Export one with kbert-export "
                                 "--export_dir=<model_base_path>.")
            labels = self.manager.label_problems()
            if labels:
                raise ValueError(" ".join(labels))
        except BaseException:
            self._unbind()
            raise
        self.manager.start()
        self.reloader.start()
        self._update_health()
        self._grpc.start()
        if self._rest is not None:
            self._rest.start()

    def _bind(self) -> None:
        options = [("grpc.max_receive_message_length", self.limits.max_request_bytes),
                   ("grpc.max_send_message_length", 1 << 30),
                   ("grpc.so_reuseport", 0)]
        interceptors = [self.api_key.interceptor()] if self.api_key is not None else []
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=self.grpc_max_threads,
                                                            thread_name_prefix="kbert-grpc"),
                                 options=options, maximum_concurrent_rpcs=self.grpc_max_concurrent_rpcs,
                                 interceptors=interceptors)
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
            PredictionServicer(self.predictor, self.budget, self.slots), self._grpc)
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelServicer(self.manager, self.reloader),
                                                                  self._grpc)
        if self.health is not None:
            health_pb2_grpc.add_HealthServicer_to_server(self.health, self._grpc)
        _check_port_free(self.host, self.port, "gRPC", "--port")
        address = f"{self._host_for_grpc()}:{self.port}"
        try:
            bound = (self._grpc.add_secure_port(address, self.credentials) if self.credentials is not None
                     else self._grpc.add_insecure_port(address))
        except RuntimeError:  # grpcio's way to say the bind failed
            bound = 0
        if bound == 0:
            raise ValueError(f"cannot listen on {self.host}:{self.port} (gRPC): the address is in use or "
                             "not this machine's; pass another --port.")
        self.port = bound
        if self.rest_api_port:
            try:
                api = RestApi(self.predictor, self.manager, self.indexes, tei_model=self.tei_model,
                              max_batch_tokens=self.max_batch_tokens)
                self._rest = RestServer(
                    (self.host, self.rest_api_port), api, self.limits,
                    self.budget, num_threads=self.rest_api_num_threads,
                    timeout_seconds=self.rest_api_timeout_in_ms / 1000,
                    max_connections=self.rest_api_max_connections, slots=self.slots, api_key=self.api_key)
            except OSError as e:
                self._grpc.stop(0)
                raise ValueError(f"cannot listen on {self.host}:{self.rest_api_port} (REST): "
                                 f"{e.strerror or e}; pass another --rest_api_port.") from None

    def _unbind(self) -> None:
        if self._rest is not None:
            self._rest.stop(0)
        if self._grpc is not None:
            self._grpc.stop(0)

    def _host_for_grpc(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    def _statuses(self, name):
        try:
            return self.manager.status(name)
        except Exception:
            return []

    def _update_health(self) -> None:
        """gRPC health: SERVING while every configured model has a version loaded."""
        if self.health is None:
            return
        status = (health_pb2.HealthCheckResponse.NOT_SERVING if self.manager.unavailable_models()
                  else health_pb2.HealthCheckResponse.SERVING)
        for service in HEALTH_SERVICES:
            self.health.set(service, status)

    def ready_line(self) -> str:
        """One line saying what is served where."""
        models = ", ".join(f"{name} version {','.join(map(str, self.manager.loaded_versions(name)))}"
                           for name in self.manager.configs)
        models += "".join(f"{', ' if models else ''}index {name} ({index.metadata.count} documents)"
                          for name, index in self.indexes.items())
        where = f"{self.host}:{self.port} (gRPC{' with TLS' if self.credentials is not None else ''})"
        if self._rest is not None:
            where += f" and {self.host}:{self._rest.server_address[1]} (REST)"
        return f"kbert-serve: serving {models} on {where}"

    def stop(self, grace: float = 5.0) -> None:
        """Stops listening, lets requests in flight finish (up to `grace` seconds), unloads."""
        if self._stopped.is_set():
            return
        if self.health is not None:
            self.health.enter_graceful_shutdown()  # NOT_SERVING while requests in flight finish
        self.reloader.stop()
        if self._rest is not None:
            self._rest.stop(grace)
        if self._grpc is not None:
            self._grpc.stop(grace).wait(grace + 1)
        if self.scheduler is not None:
            self.scheduler.stop()
        self.manager.stop()
        self._stopped.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks until `stop()` has finished; returns whether it has."""
        return self._stopped.wait(timeout)


def _check_port_free(host: str, port: int, what: str, flag: str) -> None:
    """Fails with one line if `host:port` is taken.

    grpcio reports a busy port by logging a core error and raising a bare
    RuntimeError; trying the bind first gives the user the cause instead.
    """
    if not port:
        return
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as grpc's own listener does
            probe.bind(address)
    except OSError as e:
        raise ValueError(f"cannot listen on {host}:{port} ({what}): {e.strerror or e}; is another server "
                         f"running there? Pass another {flag}.") from None
