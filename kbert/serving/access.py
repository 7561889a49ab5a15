"""Who may call the server: TLS for gRPC (`--ssl_config_file`) and a bearer API key (`--api_key`).

TLS is TF Serving's: the `--ssl_config_file` is its `SSLConfig` text proto
(`tensorflow_serving/config/ssl_config.proto`) holding the PEM text itself,

    server_key: "-----BEGIN PRIVATE KEY-----\\n..."
    server_cert: "-----BEGIN CERTIFICATE-----\\n..."
    custom_ca: "-----BEGIN CERTIFICATE-----\\n..."   # the CA client certificates must chain to
    client_verify: true                               # require and verify a client certificate

and applies to the gRPC port, as in TF Serving (its REST port has no TLS
either: put a proxy in front of REST for HTTPS).

The API key is text-embeddings-inference's and OpenAI's: every request but the
health checks (REST `GET /health` and the Prometheus metrics, gRPC
`grpc.health.v1.Health`) must carry `Authorization: Bearer <key>` (gRPC:
the `authorization` metadata entry), or is refused with UNAUTHENTICATED (HTTP
401) before its body is read. It covers TF Serving's own routes too: they run
the same models, so a key that left `:predict` open would protect nothing.
"""

from __future__ import annotations

import hmac

import grpc
from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import message_factory
from google.protobuf import text_format

# gRPC methods any client may call: the health checks (load balancers and kubelets send no key).
PUBLIC_GRPC_PREFIX = "/grpc.health.v1.Health/"


def _ssl_config_class():
    """TF Serving's `tensorflow.serving.SSLConfig` message class.

    The tensorflow-serving-api wheel ships no `ssl_config_pb2` (only the model
    server's own build has it), so the four-field message is declared here,
    field for field as `tensorflow_serving/config/ssl_config.proto`, in a
    private descriptor pool.
    """
    proto = descriptor_pb2.FileDescriptorProto(name="kbert/serving/ssl_config.proto", package="tensorflow.serving",
                                               syntax="proto3")
    message = proto.message_type.add(name="SSLConfig")
    field = descriptor_pb2.FieldDescriptorProto
    for number, (name, kind) in enumerate((("server_key", field.TYPE_STRING), ("server_cert", field.TYPE_STRING),
                                           ("custom_ca", field.TYPE_STRING), ("client_verify", field.TYPE_BOOL)), 1):
        message.field.add(name=name, number=number, type=kind, label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.serving.SSLConfig"))


SSLConfig = _ssl_config_class()


def read_ssl_config(path: str) -> grpc.ServerCredentials:
    """gRPC server credentials from a TF Serving `SSLConfig` text proto.

    Args:
        path: str. The `--ssl_config_file`.

    Returns:
        `grpc.ServerCredentials`: the server's key and certificate; with
        `client_verify`, clients must present a certificate `custom_ca` signed.

    Raises:
        ValueError: the file is missing, not an `SSLConfig`, lacks the key or
            certificate, or asks `client_verify` without `custom_ca`.

    Example:

    >>> server.add_secure_port("0.0.0.0:8500", read_ssl_config("ssl.config"))
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ValueError(f"--ssl_config_file={path}: {e.strerror or e}.") from None
    config = SSLConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as e:
        raise ValueError(f"--ssl_config_file={path} is not an SSLConfig text proto (server_key, server_cert, "
                         f"custom_ca, client_verify): {e}") from None
    missing = [field for field in ("server_key", "server_cert") if "-----BEGIN" not in getattr(config, field)]
    if missing:
        raise ValueError(f"--ssl_config_file={path}: {' and '.join(missing)} must hold PEM text "
                         "(\"-----BEGIN ...\"), as in TF Serving's SSLConfig.")
    if config.client_verify and not config.custom_ca:
        raise ValueError(f"--ssl_config_file={path}: client_verify needs custom_ca, the CA the client "
                         "certificates are checked against.")
    return grpc.ssl_server_credentials(
        [(config.server_key.encode("utf-8"), config.server_cert.encode("utf-8"))],
        root_certificates=config.custom_ca.encode("utf-8") if config.custom_ca else None,
        require_client_auth=config.client_verify)


class ApiKey:
    """The bearer token requests must carry (`--api_key`).

    Args:
        key: str. The secret; no spaces.

    Example:

    >>> ApiKey("s3cret").allows("Bearer s3cret")
    True
    """

    def __init__(self, key: str):
        if not key or any(character.isspace() for character in key):
            raise ValueError("--api_key must be a non-empty string without spaces.")
        self._key = key.encode("utf-8")

    def allows(self, authorization: str | None) -> bool:
        """Whether an `Authorization` header value is `Bearer <key>` (compared in constant time)."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode("utf-8"), self._key)

    def interceptor(self) -> grpc.ServerInterceptor:
        """A gRPC interceptor refusing calls without the key (UNAUTHENTICATED), health checks excepted."""
        return _ApiKeyInterceptor(self)


def _refuse(request, context):
    context.abort(grpc.StatusCode.UNAUTHENTICATED, "This server needs an API key: send the metadata entry "
                  "authorization: Bearer <key> (kbert-serve --api_key).")


class _ApiKeyInterceptor(grpc.ServerInterceptor):
    def __init__(self, key: ApiKey):
        self._key = key
        self._refusal = grpc.unary_unary_rpc_method_handler(_refuse)

    def intercept_service(self, continuation, handler_call_details):
        if handler_call_details.method.startswith(PUBLIC_GRPC_PREFIX):
            return continuation(handler_call_details)
        metadata = dict(handler_call_details.invocation_metadata or ())
        if self._key.allows(metadata.get("authorization")):
            return continuation(handler_call_details)
        return self._refusal
