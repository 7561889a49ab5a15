"""The model server: models loaded and polled, gRPC and REST listening, clean shutdown."""

from __future__ import annotations

import logging
import threading
from concurrent import futures

import grpc
from tensorflow_serving.apis import model_service_pb2_grpc
from tensorflow_serving.apis import prediction_service_pb2_grpc

from kbert.serving.batching import BatchingParameters
from kbert.serving.batching import BatchScheduler
from kbert.serving.model_config import ModelConfig
from kbert.serving.model_manager import ModelManager
from kbert.serving.prediction_service import ModelServicer
from kbert.serving.prediction_service import PredictionServicer
from kbert.serving.predictor import Predictor
from kbert.serving.rest import RestServer

log = logging.getLogger("kbert.serving")


class ModelServer:
    """TF Serving's protocol for kbert SavedModels: gRPC `PredictionService`/`ModelService` + REST.

    Args:
        configs: list of `ModelConfig`, the models to serve.
        host: str. Address to bind. Defaults to "127.0.0.1" (this machine only).
        port: int. gRPC port; 0 picks a free one. Defaults to 8500.
        rest_api_port: int. REST port; 0 turns REST off (as in TF Serving).
            Defaults to 8501.
        poll_wait_seconds: float. Seconds between looks for new versions; 0
            looks once at start. Defaults to 1.
        batching: `BatchingParameters` or None. None runs each request alone.
        max_request_bytes: int. Larger requests get RESOURCE_EXHAUSTED.
            Defaults to 64 MiB.
        grpc_max_threads: int. Concurrent gRPC requests. Defaults to 64.

    Example:

    >>> server = ModelServer([ModelConfig("sst2", "export/sst2")])
    >>> server.start()
    >>> server.wait()  # until server.stop() (e.g. from a SIGTERM handler)
    """

    def __init__(self, configs: list[ModelConfig], host: str = "127.0.0.1", port: int = 8500,
                 rest_api_port: int = 8501, poll_wait_seconds: float = 1.0,
                 batching: BatchingParameters | None = None, max_request_bytes: int = 64 << 20,
                 grpc_max_threads: int = 64):
        if max_request_bytes < 1:
            raise ValueError(f"--max_request_bytes={max_request_bytes}; it must be positive.")
        self.host = host
        self.port = port
        self.rest_api_port = rest_api_port
        self.max_request_bytes = max_request_bytes
        self.grpc_max_threads = grpc_max_threads
        self.manager = ModelManager(configs, poll_wait_seconds)
        self.scheduler = BatchScheduler(batching) if batching is not None else None
        self.predictor = Predictor(self.manager, self.scheduler)
        self._grpc = None
        self._rest = None
        self._rest_thread = None
        self._stopped = threading.Event()

    def start(self) -> None:
        """Loads the models (failing if one has no loadable version), then listens."""
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
        self.manager.start()
        options = [("grpc.max_receive_message_length", self.max_request_bytes),
                   ("grpc.max_send_message_length", 1 << 30),
                   ("grpc.so_reuseport", 0)]
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=self.grpc_max_threads,
                                                            thread_name_prefix="kbert-grpc"),
                                 options=options)
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
            PredictionServicer(self.predictor), self._grpc)
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelServicer(self.manager), self._grpc)
        bound = self._grpc.add_insecure_port(f"{self._host_for_grpc()}:{self.port}")
        if bound == 0:
            raise ValueError(f"cannot listen on {self.host}:{self.port} (gRPC); is the port in use? "
                             "Pass another --port.")
        self.port = bound
        self._grpc.start()
        if self.rest_api_port:
            try:
                self._rest = RestServer((self.host, self.rest_api_port), self.predictor, self.manager,
                                        self.max_request_bytes)
            except OSError as e:
                self._grpc.stop(0)
                raise ValueError(f"cannot listen on {self.host}:{self.rest_api_port} (REST): {e}; pass "
                                 "another --rest_api_port.") from None
            self._rest_thread = threading.Thread(target=self._rest.serve_forever, name="kbert-rest",
                                                 daemon=True)
            self._rest_thread.start()

    def _host_for_grpc(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    def _statuses(self, name):
        try:
            return self.manager.status(name)
        except Exception:
            return []

    def ready_line(self) -> str:
        """One line saying what is served where."""
        models = ", ".join(f"{name} version {','.join(map(str, self.manager.loaded_versions(name)))}"
                           for name in self.manager.configs)
        where = f"{self.host}:{self.port} (gRPC)"
        if self._rest is not None:
            where += f" and {self.host}:{self._rest.server_address[1]} (REST)"
        return f"kbert-serve: serving {models} on {where}"

    def stop(self, grace: float = 5.0) -> None:
        """Stops listening, lets requests in flight finish (up to `grace` seconds), unloads."""
        if self._stopped.is_set():
            return
        if self._rest is not None:
            self._rest.shutdown()
            self._rest.server_close()
        if self._grpc is not None:
            self._grpc.stop(grace).wait(grace + 1)
        if self.scheduler is not None:
            self.scheduler.stop()
        self.manager.stop()
        self._stopped.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks until `stop()` has finished; returns whether it has."""
        return self._stopped.wait(timeout)
