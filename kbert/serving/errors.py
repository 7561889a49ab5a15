"""The one error type of the server: a gRPC status code plus a message naming the culprit."""

from __future__ import annotations

import grpc

# gRPC code -> HTTP status of the REST API.
_HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 413,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.INTERNAL: 500,
}


class ServingError(Exception):
    """A request the server answers with an error status and keeps serving.

    Args:
        code: `grpc.StatusCode`, e.g. `INVALID_ARGUMENT`, `NOT_FOUND`.
        message: str. Names the input, model or limit at fault.
        http_status: int or None. The REST status when the code's usual one
            does not fit (RESOURCE_EXHAUSTED is 413 for a body too large but
            429 for too many requests at once). Defaults to the code's.

    Example:

    >>> raise ServingError(grpc.StatusCode.NOT_FOUND, "Servable not found for request: Latest(sst3)")
    """

    def __init__(self, code: grpc.StatusCode, message: str, http_status: int | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self._http_status = http_status

    @property
    def http_status(self) -> int:
        return self._http_status or _HTTP_STATUS.get(self.code, 500)


def invalid(message: str) -> ServingError:
    return ServingError(grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> ServingError:
    return ServingError(grpc.StatusCode.NOT_FOUND, message)


def op_error_cause(message: str, max_lines: int = 2) -> str:
    """The op's own words out of a TensorFlow runtime error, without the wrapping.

    An eager call of a loaded signature reports "Graph execution error:", a
    "Detected at node ..." header, possibly a stack, then the op's message and a
    `[[{{node ...}}]] [Op:...]` trailer; only the op's message says what was
    wrong with the input, so that is what a client gets (with the node's name).

    Args:
        message: str. `tf.errors.OpError.message`.
        max_lines: int. Most lines of the op's message kept. Defaults to 2.

    Returns:
        e.g. "indices[0,1] = 99999 is not in [0, 3003) (node .../token_embedding_1/GatherV2)".

    Example:

    >>> op_error_cause("Graph execution error:\\n\\nDetected at node n defined at (most recent call "
    ...                "last):\\n<stack traces unavailable>\\nbad value\\n\\t [[{{node n}}]]")
    'bad value (node n)'
    """
    lines = message.splitlines()
    node = ""
    for line in lines:
        if line.startswith("Detected at node "):
            node = line[len("Detected at node "):].split(" defined at")[0].strip("'")
    end = next((i for i, line in enumerate(lines) if line.lstrip().startswith("[[{{node")), len(lines))
    cause = []
    for line in reversed(lines[:end]):
        # Walking back from the trailer, the op's message ends where the header or stack begins.
        if (not line.strip() or line[0].isspace() or line in ("Graph execution error:", "<stack traces unavailable>")
                or line.startswith(("Detected at node ", "Node: "))):
            if cause:
                break
            continue
        cause.insert(0, line.strip())
    if not cause:
        cause = [line.strip() for line in lines if line.strip() and line.strip() != "Graph execution error:"]
    text = " ".join(cause[:max_lines]) or message.strip() or "(TensorFlow gave no message)"
    return f"{text} (node {node})" if node else text
