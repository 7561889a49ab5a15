"""The operators' view of kbert-serve: Prometheus metrics at TF Serving's `/monitoring/prometheus/metrics`.

Every request, over gRPC or REST and through any API, is counted and timed
per model, version, signature and API; every batch the model runs records its
examples (and, when the batcher knows them, its tokens); a gauge reads the
batching queue's length when scraped; refusals (a server too busy, a deadline
passed, a request too large) are counted by cause. The exposition comes from
`prometheus_client` (pure Python, no dependencies) on a registry of the
server's own, so several servers in one process never mix their numbers.

Label values are bounded: `model` is only ever a configured model name (a
request for an unknown one is counted under `model=""`), `version` a loaded
version, `signature` one the servable has, `api` and `status` fixed sets.
"""

from __future__ import annotations

import time
from typing import Callable

import grpc
import prometheus_client

from kbert.serving.errors import ServingError

METRICS_PATH = "/monitoring/prometheus/metrics"
CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST

# Statuses that mean "not served now, may succeed later": what an operator watches for overload.
REFUSALS = ("RESOURCE_EXHAUSTED", "UNAVAILABLE", "DEADLINE_EXCEEDED")

# HTTP status -> gRPC code name, for REST answers that carry no ServingError (errors.py's table reversed).
_HTTP_CODES = {200: "OK", 400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 405: "UNIMPLEMENTED", 413: "RESOURCE_EXHAUSTED",
               429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 501: "UNIMPLEMENTED", 503: "UNAVAILABLE",
               504: "DEADLINE_EXCEEDED", 500: "INTERNAL"}

_LATENCY_BUCKETS = (.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60)
_SIZE_BUCKETS = tuple(2 ** i for i in range(11))  # 1 .. 1024 examples
_TOKEN_BUCKETS = tuple(2 ** i for i in range(4, 19))  # 16 .. 262144 tokens


def status_of_http(status: int) -> str:
    """The gRPC code name of a REST answer's HTTP status."""
    return _HTTP_CODES.get(status, "UNKNOWN" if status >= 400 else "OK")


class RequestRecord:
    """What one request turned out to be; filled in as it is answered, recorded when it ends.

    Attributes:
        model, version, signature: str. Set once the servable is known (empty
            before: an unknown model never becomes a label value).
        status: str. The gRPC code name of the answer; "OK" unless set.
    """

    __slots__ = ("api", "entrypoint", "model", "version", "signature", "status", "started")

    def __init__(self, api: str, entrypoint: str):
        self.api = api
        self.entrypoint = entrypoint
        self.model = self.version = self.signature = ""
        self.status = "OK"
        self.started = time.perf_counter()

    def servable(self, servable, signature: str) -> None:
        """Labels the request with the servable and signature that answered it."""
        self.model, self.version, self.signature = servable.name, str(servable.version), signature


class ServingMetrics:
    """The metrics of one server, on a registry of its own.

    Args:
        registry: `prometheus_client.CollectorRegistry` or None (a new one).

    Example:

    >>> metrics = ServingMetrics()
    >>> with metrics.request("predict", "grpc") as record:
    ...     record.servable(servable, "serving_default")
    >>> metrics.observe_batch("sst2", 1, "serving_default", size=8, tokens=256)
    >>> text = metrics.exposition()  # what GET /monitoring/prometheus/metrics returns
    """

    def __init__(self, registry: prometheus_client.CollectorRegistry | None = None):
        self.registry = registry or prometheus_client.CollectorRegistry(auto_describe=True)
        labels = ("model", "version", "signature", "api", "entrypoint")
        self.requests = prometheus_client.Counter(
            "kbert_serving_requests", "Requests answered, by model, version, signature, API (predict, "
            "classify, regress, multi_inference, embeddings, rerank, get_model_metadata), entrypoint (grpc, "
            "rest) and status (gRPC code name).", labels + ("status",), registry=self.registry)
        self.latency = prometheus_client.Histogram(
            "kbert_serving_request_latency_seconds", "Time from a request's start to its answer "
            "(parsing, queueing, the model, encoding), every status.", labels, buckets=_LATENCY_BUCKETS,
            registry=self.registry)
        self.examples = prometheus_client.Counter(
            "kbert_serving_request_examples", "Examples (texts, pairs, rows) in requests the model ran.",
            ("model", "version", "signature", "api"), registry=self.registry)
        self.batch_size = prometheus_client.Histogram(
            "kbert_serving_batch_size", "Examples in each batch the model ran (a request alone is a batch "
            "of its size).", ("model", "version", "signature"), buckets=_SIZE_BUCKETS, registry=self.registry)
        self.batch_tokens = prometheus_client.Histogram(
            "kbert_serving_batch_tokens", "Estimated padded tokens (examples x the longest "
            "example's estimate) in each batch, as --max_batch_tokens counts them.", ("model", "version", "signature"),
            buckets=_TOKEN_BUCKETS, registry=self.registry)
        self.refusals = prometheus_client.Counter(
            "kbert_serving_refusals", "Requests not served because the server was busy or the client's "
            "deadline passed, by reason (RESOURCE_EXHAUSTED: a limit such as --max_request_bytes or "
            "--max_concurrent_requests; UNAVAILABLE: --max_concurrent_request_bytes, a full batching queue, "
            "--rest_api_max_connections; DEADLINE_EXCEEDED) and entrypoint.", ("reason", "entrypoint"),
            registry=self.registry)
        self.queue_length = prometheus_client.Gauge(
            "kbert_serving_queued_examples", "Examples waiting in the batching queues (0 without "
            "--enable_batching).", registry=self.registry)
        self._queue_source: Callable[[], int] | None = None
        self.queue_length.set_function(self._queued)

    def track_queue(self, source: Callable[[], int]) -> None:
        """Reads the queue length from `source()` whenever the metrics are scraped.

        Args:
            source: callable returning the examples waiting to be batched
                (`BatchScheduler.queued_examples`).
        """
        self._queue_source = source

    def _queued(self) -> float:
        return float(self._queue_source()) if self._queue_source is not None else 0.0

    def request(self, api: str, entrypoint: str) -> "_Timing":
        """A context manager timing one request; a `ServingError` escaping it sets the status.

        Args:
            api: str. "predict", "classify", "regress", "multi_inference",
                "embeddings", "rerank", "get_model_metadata", ...
            entrypoint: str. "grpc" or "rest".

        Returns:
            A context manager yielding the request's `RequestRecord`.
        """
        return _Timing(self, RequestRecord(api, entrypoint))

    def finish(self, record: RequestRecord) -> None:
        """Records a finished request (its count, latency and, if refused, the refusal)."""
        seconds = time.perf_counter() - record.started
        labels = (record.model, record.version, record.signature, record.api, record.entrypoint)
        self.requests.labels(*labels, record.status).inc()
        self.latency.labels(*labels).observe(seconds)
        if record.status in REFUSALS:
            self.refusals.labels(record.status, record.entrypoint).inc()

    def observe_examples(self, servable, signature: str, api: str, count: int) -> None:
        """Counts the examples of a request the model ran."""
        self.examples.labels(servable.name, str(servable.version), signature, api).inc(count)

    def observe_batch(self, model: str, version, signature: str, size: int, tokens: int | None = None) -> None:
        """Records one batch the model ran: the batcher's hook.

        Args:
            model: str. Model name.
            version: int or str. Version.
            signature: str. Signature name.
            size: int. Examples in the batch (padding rows included).
            tokens: int or None. Estimated padded tokens in the batch
                (`token_counts.example_tokens`); None records no tokens.
        """
        labels = (model, str(version), signature)
        self.batch_size.labels(*labels).observe(size)
        if tokens is not None:
            self.batch_tokens.labels(*labels).observe(tokens)

    def observe_refusal(self, reason: str, entrypoint: str) -> None:
        """Counts a refusal made outside any request record (e.g. REST's connection cap)."""
        self.refusals.labels(reason, entrypoint).inc()

    def exposition(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return prometheus_client.generate_latest(self.registry)


class _Timing:
    def __init__(self, metrics: ServingMetrics, record: RequestRecord):
        self.metrics = metrics
        self.record = record

    def __enter__(self) -> RequestRecord:
        return self.record

    def __exit__(self, kind, error, traceback) -> bool:
        if isinstance(error, ServingError):
            self.record.status = error.code.name
        elif error is not None and self.record.status == "OK":
            self.record.status = grpc.StatusCode.INTERNAL.name
        self.metrics.finish(self.record)
        return False
