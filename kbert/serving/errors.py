"""The one error type of the server: a gRPC status code plus a message naming the culprit."""

from __future__ import annotations

import grpc

# gRPC code -> HTTP status of the REST API.
_HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 413,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.INTERNAL: 500,
}


class ServingError(Exception):
    """A request the server answers with an error status and keeps serving.

    Args:
        code: `grpc.StatusCode`, e.g. `INVALID_ARGUMENT`, `NOT_FOUND`.
        message: str. Names the input, model or limit at fault.

    Example:

    >>> raise ServingError(grpc.StatusCode.NOT_FOUND, "Servable not found for request: Latest(sst3)")
    """

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return _HTTP_STATUS.get(self.code, 500)


def invalid(message: str) -> ServingError:
    return ServingError(grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> ServingError:
    return ServingError(grpc.StatusCode.NOT_FOUND, message)
