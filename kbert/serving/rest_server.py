"""The HTTP server that carries the REST API: tornado, with bounded connections, reads and bytes.

Why tornado: its `HTTPServer` reads every connection on one event loop, so a
client that announces a large body and sends nothing holds a socket, not a
thread (the standard library's `http.server` gave each connection a thread and
no read timeout: 300 such connections held 300 threads). It times out slow
headers (`idle_connection_timeout`) and slow bodies (`body_timeout`), caps the
body (`max_body_size`), and with `stream_request_body` lets the handler refuse
a request from its headers alone and count body bytes as they arrive. It is
pure Python, has no dependencies and installs beside TensorFlow. (waitress reads
whole bodies before the application can answer, so its 413 cannot carry TF
Serving's JSON error body; uvicorn has no header timeout; cheroot holds a
thread per request while the body trickles in.) Two things tornado lacks are
written here: a cap on open connections (`_BoundedHTTPServer`) and a byte
budget shared by all requests in flight (`kbert.serving.limits.ByteBudget`).

Model work never runs on the event loop: a bounded thread pool
(`--rest_api_num_threads`) parses the JSON, runs the model and encodes the
answer, so a slow model cannot stall reading other requests.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from concurrent import futures

import grpc
import tornado.httpserver
import tornado.netutil
import tornado.web

from kbert.serving.errors import ServingError
from kbert.serving.errors import invalid
from kbert.serving.access import ApiKey
from kbert.serving.limits import ByteBudget
from kbert.serving.limits import Limits
from kbert.serving.limits import RequestSlots
from kbert.serving.metrics import REFUSALS
from kbert.serving.rest import PUBLIC_PATHS
from kbert.serving.rest import RawBody
from kbert.serving.rest import RestApi
from kbert.serving.rest import error_body

log = logging.getLogger("kbert.serving")


def _json_bytes(payload: dict) -> bytes:
    return json.dumps(payload).encode("utf-8")


def _log_request(handler: tornado.web.RequestHandler) -> None:
    # One debug line per request (kbert-serve -v 1), instead of tornado's warnings for every 4xx.
    request = handler.request
    log.debug("REST %s %s %d %.1fms", request.method, request.path, handler.get_status(),
              request.request_time() * 1e3)


class _BoundedHTTPServer(tornado.httpserver.HTTPServer):
    """tornado's HTTPServer that answers 503 and hangs up past `max_connections` open connections."""

    max_connections = 1000
    open_connections = 0
    metrics = None  # ServingMetrics: refusals are counted

    def handle_stream(self, stream, address) -> None:
        if self.open_connections >= self.max_connections:
            if self.metrics is not None:
                self.metrics.observe_refusal("UNAVAILABLE", "rest")
            body = _json_bytes({"error": f"The server has {self.open_connections} connections open, its limit "
                                         f"(--rest_api_max_connections={self.max_connections}); retry later."})
            head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode("ascii")
            stream.write(head + body).add_done_callback(lambda _: stream.close())
            return
        self.open_connections += 1  # only the event loop's thread touches the count
        super().handle_stream(stream, address)

    def on_close(self, server_conn) -> None:
        self.open_connections -= 1
        super().on_close(server_conn)


@tornado.web.stream_request_body
class _Handler(tornado.web.RequestHandler):
    """Every path: GET answers status and metadata, POST predicts; errors are TF Serving's JSON."""

    def initialize(self, server: "RestServer") -> None:
        self.server = server
        self._chunks: list[bytes] = []
        self._received = 0
        self._held = 0  # bytes taken from the server's budget, given back when the request ends
        self._slot = False  # a --max_concurrent_requests slot, given back when the request ends
        self._deadline = time.monotonic() + server.timeout_seconds
        self._open = True  # until finished or the client hangs up
        server.in_flight += 1  # only the event loop's thread touches the count

    def set_default_headers(self) -> None:
        self.set_header("Server", "kbert-serve")
        self.set_header("Content-Type", "application/json")

    def _reply(self, status: int, payload) -> None:
        if self._finished or not self._open:
            return
        self.set_status(status)
        if isinstance(payload, RawBody):
            self.set_header("Content-Type", payload.content_type)
            self.finish(payload.body)
            return
        self.finish(_json_bytes(payload))

    def _refuse(self, error: ServingError) -> None:
        # Refused from the headers or while the body arrives: never reaches the API's request count.
        if error.code.name in REFUSALS:
            self.server.api.metrics.observe_refusal(error.code.name, "rest")
        self._reply(error.http_status, error_body(self.request.path, error))

    def write_error(self, status_code: int, **kwargs) -> None:
        # tornado's own errors (an unknown method, an uncaught exception) keep the JSON error form.
        message = self._reason
        if "exc_info" in kwargs and status_code >= 500:
            message = f"internal error: {kwargs['exc_info'][1]!r}"
        self.finish(_json_bytes({"error": message}))

    def prepare(self) -> None:
        api_key = self.server.api_key
        if (api_key is not None and self.request.path not in PUBLIC_PATHS
                and not api_key.allows(self.request.headers.get("Authorization"))):
            # Refused from the headers: the body is never read.
            self.set_header("WWW-Authenticate", 'Bearer realm="kbert-serve"')
            self._refuse(ServingError(grpc.StatusCode.UNAUTHENTICATED, "This server needs an API key: send "
                                      "the header Authorization: Bearer <key> (kbert-serve --api_key)."))
            return
        if self.request.method != "POST":
            return
        headers = self.request.headers
        try:
            if self.server.slots is not None:  # refused from the headers, before the body is read
                self.server.slots.take()
                self._slot = True
            if "Content-Length" in headers:
                try:
                    length = int(headers["Content-Length"])
                except ValueError:
                    raise invalid(f"Content-Length {headers['Content-Length']!r} is not a number.") from None
                self.server.limits.check_request_bytes(length)  # refused before a byte of the body is read
            elif headers.get("Transfer-Encoding", "").lower() != "chunked":
                raise invalid("The request needs a Content-Length header.")
        except ServingError as e:
            self._refuse(e)

    def data_received(self, chunk: bytes) -> None:
        if self._finished:
            return
        try:
            self._received += len(chunk)
            self.server.limits.check_request_bytes(self._received)  # chunked bodies have no length up front
            self.server.budget.take(len(chunk))
        except ServingError as e:
            self._refuse(e)
            return
        self._held += len(chunk)
        self._chunks.append(chunk)

    async def post(self, *_) -> None:
        if self._finished:
            return
        raw, self._chunks = b"".join(self._chunks), []
        loop = asyncio.get_running_loop()
        status, payload = await loop.run_in_executor(self.server.executor, self.server.answer_post,
                                                     self.request.path, raw, self._deadline)
        self._reply(status, payload)

    def get(self, *_) -> None:
        self._reply(*self.server.api.get(self.request.path))

    def on_finish(self) -> None:
        self._end()

    def on_connection_close(self) -> None:
        self._end()
        super().on_connection_close()

    def _end(self) -> None:
        if self._open:
            self._open = False
            self.server.in_flight -= 1
            self.server.budget.give(self._held)
            self._held = 0
            if self._slot:
                self.server.slots.give()
                self._slot = False


class RestServer:
    """TF Serving's REST API over HTTP/1.1 on tornado, in a thread of its own.

    The listening socket is bound when the object is made, so a port in use
    is reported before any model loads.

    Args:
        address: `(host, port)`; port 0 picks a free one.
        api: `RestApi` answering the paths.
        limits: `Limits` (request bytes and batch checks).
        budget: `ByteBudget` shared with gRPC: bytes of all requests in flight.
        num_threads: int. Requests parsed and run at once
            (`--rest_api_num_threads`).
        timeout_seconds: float. Longest wait for a request's headers, for its
            body, and before its model work starts (`--rest_api_timeout_in_ms`).
        max_connections: int. Open connections past which new ones get 503
            (`--rest_api_max_connections`).
        slots: `RequestSlots` or None. POST requests in flight at once, shared
            with gRPC (`--max_concurrent_requests`); past it 429 at once.
        api_key: `ApiKey` or None. Every path but `PUBLIC_PATHS` needs it
            (`Authorization: Bearer <key>`); others get 401 from their headers.

    Raises:
        OSError: the address cannot be bound (e.g. the port is in use).

    Example:

    >>> rest = RestServer(("127.0.0.1", 8501), RestApi(predictor, manager), Limits(), ByteBudget(1 << 28))
    >>> rest.start()
    >>> rest.stop()
    """

    def __init__(self, address: tuple[str, int], api: RestApi, limits: Limits, budget: ByteBudget,
                 num_threads: int = 16, timeout_seconds: float = 30.0, max_connections: int = 1000,
                 slots: RequestSlots | None = None, api_key: ApiKey | None = None):
        self.api = api
        self.api_key = api_key
        self.slots = slots
        self.limits = limits
        self.budget = budget
        self.timeout_seconds = timeout_seconds
        self.max_connections = max_connections
        self.executor = futures.ThreadPoolExecutor(num_threads, thread_name_prefix="kbert-rest")
        self._sockets = tornado.netutil.bind_sockets(address[1], address=address[0])
        self.server_address = self._sockets[0].getsockname()[:2]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._http: _BoundedHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.in_flight = 0

    def answer_post(self, path: str, raw: bytes, deadline: float) -> tuple[int, dict]:
        """Runs on the thread pool: the model's work, with anything unforeseen answered as 500."""
        try:
            return self.api.post(path, raw, deadline)
        except Exception as e:  # never drop the connection without an answer
            log.exception("kbert-serve: REST POST %s failed", path)
            return 500, error_body(path, ServingError(grpc.StatusCode.INTERNAL,
                                                      f"internal error: {type(e).__name__}: {e}"))

    def start(self) -> None:
        """Serves in a background thread; returns once it accepts connections."""
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), name="kbert-rest-loop", daemon=True)
        self._thread.start()
        ready.wait()

    def _serve(self, ready: threading.Event) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        application = tornado.web.Application([(r"/.*", _Handler, {"server": self})], log_function=_log_request)
        self._http = _BoundedHTTPServer(
            application, idle_connection_timeout=self.timeout_seconds, body_timeout=self.timeout_seconds,
            # One chunk above the limit, so that the handler's JSON 413 comes before tornado's bare 400.
            max_body_size=self.limits.max_request_bytes + (64 << 10), max_header_size=64 << 10)
        self._http.max_connections = self.max_connections
        self._http.metrics = self.api.metrics
        self._http.add_sockets(self._sockets)
        self._loop.call_soon(ready.set)
        self._loop.run_forever()
        self._loop.close()

    def stop(self, grace: float = 5.0) -> None:
        """Stops accepting, waits up to `grace` seconds for requests being answered, then closes."""
        if self._loop is None or self._thread is None:
            for sock in self._sockets:
                sock.close()
            self.executor.shutdown(wait=False)
            return

        async def shut_down():
            self._http.stop()
            until = self._loop.time() + grace
            while self.in_flight and self._loop.time() < until:
                await asyncio.sleep(0.05)
            try:  # then hang up on idle keep-alive connections too
                await asyncio.wait_for(self._http.close_all_connections(), 1.0)
            except asyncio.TimeoutError:
                pass
            self._loop.stop()

        asyncio.run_coroutine_threadsafe(shut_down(), self._loop)
        self._thread.join(grace + 5)
        self.executor.shutdown(wait=False)
