"""Query a TF Serving model over gRPC: kbert-serve and the stock tensorflow_model_server alike.

    python serving/client.py --server=localhost:8500 --model_name=sst2 --text "a gorgeous film"
    python serving/client.py --server=localhost:8500 --model_name=mrpc \
        --text "He said so." --text_pair "So he said."
    python serving/client.py --server=localhost:8500 --model_name=squad \
        --question "Where is it?" --context "It is in Paris."
    python serving/client.py --server=localhost:8500 --model_name=sst2 --metadata
    # a server with --ssl_config_file (client_verify: true) and --api_key:
    python serving/client.py --server=localhost:8500 --model_name=sst2 --text "a gorgeous film" \
        --ssl_root_cert=ca.pem --ssl_client_cert=client.pem --ssl_client_key=client.key --api_key=KEY

Needs only tensorflow-serving-api (and its tensorflow) and grpcio; not kbert.
"""

from __future__ import annotations

import argparse
import sys

import grpc
import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import get_model_metadata_pb2
from tensorflow_serving.apis import predict_pb2
from tensorflow_serving.apis import prediction_service_pb2_grpc

# The raw-text inputs a kbert signature may take; the flags of the same name fill them.
TEXT_INPUTS = ("text", "text_pair", "question", "context")


def predict(stub, model_name: str, inputs: dict[str, list[str]], signature_name: str = "serving_default",
            version: int | None = None, timeout: float = 30.0, metadata=None) -> dict[str, np.ndarray]:
    """Sends one Predict request of strings; returns the outputs as numpy arrays.

    `metadata`: gRPC metadata, e.g. `[("authorization", "Bearer KEY")]` for kbert-serve --api_key."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature_name
    if version is not None:
        request.model_spec.version.value = version
    for key, values in inputs.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto([v.encode("utf-8") for v in values],
                                                          dtype=tf.string))
    response = stub.Predict(request, timeout=timeout, metadata=metadata)
    return {key: tf.make_ndarray(value) for key, value in response.outputs.items()}


def signatures(stub, model_name: str, timeout: float = 30.0, metadata=None) -> str:
    """Returns the model's signatures (GetModelMetadata) as text."""
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = model_name
    request.metadata_field.append("signature_def")
    response = stub.GetModelMetadata(request, timeout=timeout, metadata=metadata)
    signatures = get_model_metadata_pb2.SignatureDefMap()
    response.metadata["signature_def"].Unpack(signatures)
    lines = [f"{model_name} version {response.model_spec.version.value}"]
    for name, signature in sorted(signatures.signature_def.items()):
        ins = ", ".join(f"{k}:{tf.as_dtype(v.dtype).name}" for k, v in sorted(signature.inputs.items()))
        outs = ", ".join(f"{k}:{tf.as_dtype(v.dtype).name}" for k, v in sorted(signature.outputs.items()))
        lines.append(f"  {name}: ({ins}) -> ({outs})")
    return "\n".join(lines)


def _show(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        return [_show(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return round(float(value), 4)
    return value.item() if isinstance(value, np.generic) else value


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def _channel(args) -> grpc.Channel:
    """A plaintext channel, or TLS when --ssl_root_cert is given (with a client certificate if asked)."""
    if not args.ssl_root_cert:
        return grpc.insecure_channel(args.server)
    credentials = grpc.ssl_channel_credentials(_read(args.ssl_root_cert), _read(args.ssl_client_key),
                                               _read(args.ssl_client_cert))
    return grpc.secure_channel(args.server, credentials)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="localhost:8500", help="host:port of the gRPC server.")
    parser.add_argument("--model_name", required=True, help="Model to ask.")
    parser.add_argument("--signature_name", default="serving_default")
    parser.add_argument("--version", type=int, default=None, help="Specific version (default: latest).")
    for name in TEXT_INPUTS:
        parser.add_argument(f"--{name}", action="append", help=f"Value(s) of input '{name}' (repeatable).")
    parser.add_argument("--metadata", action="store_true", help="Print the signatures instead.")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--api_key", help="Sent as 'authorization: Bearer KEY' (kbert-serve --api_key).")
    parser.add_argument("--ssl_root_cert", help="PEM file of the CA of a TLS server (--ssl_config_file); "
                        "without it the channel is plaintext.")
    parser.add_argument("--ssl_client_cert", help="With --ssl_root_cert: this client's PEM certificate "
                        "(for a server with client_verify).")
    parser.add_argument("--ssl_client_key", help="Its PEM private key.")
    args = parser.parse_args(argv)
    call_metadata = [("authorization", f"Bearer {args.api_key}")] if args.api_key else None
    with _channel(args) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            if args.metadata:
                print(signatures(stub, args.model_name, args.timeout, call_metadata))
                return 0
            inputs = {name: getattr(args, name) for name in TEXT_INPUTS if getattr(args, name)}
            if not inputs:
                parser.error("give --text (and --text_pair), or --question and --context.")
            outputs = predict(stub, args.model_name, inputs, args.signature_name, args.version, args.timeout,
                              call_metadata)
        except grpc.RpcError as e:
            print(f"client.py: {e.code().name}: {e.details()}", file=sys.stderr)
            return 1
    batch = len(next(iter(inputs.values())))
    for i in range(batch):
        shown = {key: _show(value[i]) for key, value in sorted(outputs.items())}
        print(" | ".join(f"{key}={value}" for key, value in shown.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
