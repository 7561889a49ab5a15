"""What one request may ask of the server, and what all requests together may hold.

Every limit is checked before the model runs, costs time linear in the request,
and is refused with a message naming the limit and the flag that sets it, so a
client learns in milliseconds what to change (one request must never be able
to take down a server that others share). Deadlines travel with a request as a
`time.monotonic()` instant, so work whose client has already given up is not
started.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import grpc
import numpy as np

from kbert.serving.errors import ServingError
from kbert.serving.errors import invalid


@dataclasses.dataclass
class Limits:
    """Per-request and server-wide limits on Predict requests.

    Args:
        max_batch_size: int. Most examples in one request (`--max_batch_size`).
            Defaults to 256.
        max_text_bytes: int. Longest string in any string input, in UTF-8
            bytes (`--max_text_bytes`). Defaults to 1 MiB, so a 1 MB document
            passes; NER and QA models read it in windows.
        max_request_bytes: int. Largest request (`--max_request_bytes`).
            Defaults to 64 MiB.
        max_concurrent_request_bytes: int. Most request bytes held by all
            requests being read or answered at once
            (`--max_concurrent_request_bytes`); past it requests get
            UNAVAILABLE (HTTP 503) and may retry. Defaults to 256 MiB.
        max_concurrent_requests: int. Most model requests (gRPC and REST
            together) being read, queued or answered at once
            (`--max_concurrent_requests`, text-embeddings-inference's
            `--max-concurrent-requests`); past it a request is refused at once
            with RESOURCE_EXHAUSTED (HTTP 429) instead of queueing. Defaults
            to 512, as TEI: at the 150-750 requests/s kbert-serve answered
            on this 2-core machine (benchmarks/serving_batching.py,
            serving_latency.py) the 512th waits 0.7-3.5 s, inside the 30 s
            REST deadline; more would only queue towards it.

    Example:

    >>> limits = Limits(max_batch_size=64)
    >>> limits.check_inputs({"text": np.array([b"a gorgeous film"], object)})
    """

    max_batch_size: int = 256
    max_text_bytes: int = 1 << 20
    max_request_bytes: int = 64 << 20
    max_concurrent_request_bytes: int = 256 << 20
    max_concurrent_requests: int = 512

    def __post_init__(self):
        for field in dataclasses.fields(self):
            if getattr(self, field.name) < 1:
                raise ValueError(f"--{field.name}={getattr(self, field.name)}; it must be positive.")
        if self.max_concurrent_request_bytes < self.max_request_bytes:
            raise ValueError(f"--max_concurrent_request_bytes={self.max_concurrent_request_bytes} is below "
                             f"--max_request_bytes={self.max_request_bytes}; a request of the largest "
                             "allowed size could never run. Raise the first or lower the second.")

    def check_batch(self, input_name: str, batch: int) -> None:
        """Refuses a batch over `max_batch_size` (cheap: call before decoding the input)."""
        if batch > self.max_batch_size:
            raise invalid(f"input {input_name!r} has a batch of {batch} examples, over the limit of "
                          f"{self.max_batch_size} (--max_batch_size); split the request.")

    def check_inputs(self, inputs: dict[str, np.ndarray]) -> None:
        """Checks every input's batch size and every string's length.

        Raises:
            ServingError: INVALID_ARGUMENT naming the input, the example, the
                limit and its flag.
        """
        for name, value in inputs.items():
            if value.ndim:
                self.check_batch(name, value.shape[0])
            if value.dtype.kind not in "OSU" or not value.size:
                continue
            lengths = np.fromiter((_byte_length(item) for item in value.flat), dtype=np.int64, count=value.size)
            longest = int(lengths.argmax())
            if lengths[longest] > self.max_text_bytes:
                where = np.unravel_index(longest, value.shape)
                raise invalid(f"input {name!r} example {list(map(int, where))} is {int(lengths[longest])} bytes, "
                              f"over the limit of {self.max_text_bytes} bytes per string (--max_text_bytes).")

    def check_request_bytes(self, size: int) -> None:
        """Refuses a request over `max_request_bytes` with RESOURCE_EXHAUSTED (HTTP 413)."""
        if size > self.max_request_bytes:
            raise ServingError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"Request of {size} bytes is over --max_request_bytes={self.max_request_bytes}.")


def _byte_length(item) -> int:
    if isinstance(item, bytes):
        return len(item)
    return len(item.encode("utf-8")) if isinstance(item, str) else 0


class ByteBudget:
    """Bytes that requests in flight may hold together; taking more than is left fails at once.

    Failing at once instead of queueing keeps a burst of large requests from
    holding memory while they wait, and a client can retry elsewhere.

    Args:
        capacity: int. Total bytes (`--max_concurrent_request_bytes`).

    Example:

    >>> budget = ByteBudget(1 << 20)
    >>> budget.take(1000)
    >>> budget.give(1000)
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._used = 0
        self._lock = threading.Lock()

    def take(self, size: int) -> None:
        """Reserves `size` bytes.

        Raises:
            ServingError: UNAVAILABLE when fewer than `size` bytes are left.
        """
        with self._lock:
            if self._used + size > self.capacity:
                used = self._used
            else:
                self._used += size
                return
        raise ServingError(grpc.StatusCode.UNAVAILABLE,
                           f"The server holds {used} bytes of requests in flight; {size} more would pass "
                           f"--max_concurrent_request_bytes={self.capacity}. Retry later.")

    def give(self, size: int) -> None:
        with self._lock:
            self._used -= size

    @property
    def used(self) -> int:
        with self._lock:
            return self._used


class RequestSlots:
    """Requests that may be in flight at once; one more is refused at once, not queued.

    Refusing at once (text-embeddings-inference's `--max-concurrent-requests`)
    lets a client or load balancer go elsewhere instead of waiting behind a
    queue that only grows. Shared by gRPC and REST.

    Args:
        capacity: int. Requests at once (`--max_concurrent_requests`).

    Example:

    >>> slots = RequestSlots(512)
    >>> slots.take()
    >>> slots.give()
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._used = 0
        self._lock = threading.Lock()

    def take(self) -> None:
        """Holds one slot until `give()`.

        Raises:
            ServingError: RESOURCE_EXHAUSTED (HTTP 429) when all are held.
        """
        with self._lock:
            if self._used < self.capacity:
                self._used += 1
                return
        raise ServingError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                           f"The server is answering {self.capacity} requests, its limit "
                           f"(--max_concurrent_requests={self.capacity}); retry later.", http_status=429)

    def give(self) -> None:
        with self._lock:
            self._used -= 1

    @property
    def used(self) -> int:
        with self._lock:
            return self._used


def check_deadline(deadline: float | None, what: str) -> None:
    """Raises DEADLINE_EXCEEDED if `deadline` (a `time.monotonic()` instant) has passed.

    Args:
        deadline: float or None (no deadline).
        what: str. What would have run, for the message.
    """
    if deadline is not None and time.monotonic() >= deadline:
        raise deadline_exceeded(what)


def deadline_exceeded(what: str) -> ServingError:
    """The DEADLINE_EXCEEDED error of a request that was not run."""
    return ServingError(grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"The request's deadline passed before {what}; it was not run. Send a longer deadline "
                        "(gRPC timeout, or kbert-serve --rest_api_timeout_in_ms for REST) or retry.")
