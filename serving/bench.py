"""Load a TF Serving server over gRPC: QPS and p50/p90/p99 latency per model and concurrency.

    python serving/bench.py --server=localhost:8500 --models=sst2,sst2_int8 --concurrency=1,8,32
    python serving/bench.py --server=localhost:8500 --models=embed --batch_size=32 --seconds=20 \
        --texts_file=dev.txt --api_key=KEY

First one request to each model (a warm-up, and a check: a model the server
does not answer stops the run at once, naming it). Then each (model,
concurrency) runs for `--seconds`: that many client threads each send Predict
requests of `--batch_size` texts (taken in turn from `--texts_file`, one text
a line, or a few built-in sentences) one after another. Prints a Markdown table: requests, errors, requests/s, texts/s,
p50/p90/p99 latency in ms, and the 1-minute load average at the end of the
run (a busy machine's figures are not a quiet one's). kbert-serve and the
stock tensorflow_model_server alike; needs tensorflow-serving-api and grpcio,
not kbert.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import grpc
import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before client.py imports TensorFlow
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client import predict  # noqa: E402  (serving/client.py, beside this file)
from tensorflow_serving.apis import prediction_service_pb2_grpc  # noqa: E402

SENTENCES = ["a gorgeous , witty , seductive movie .", "the plot is thin and the acting dull",
             "one of the best films of the year , and the funniest", "it 's a mess .",
             "an intelligent , moving and invigorating film that never loses its way"]


def run_load(stub, model: str, texts: list[str], concurrency: int, batch_size: int, seconds: float,
             timeout: float = 30.0, metadata=None, signature_name: str = "serving_default") -> dict:
    """Sends requests from `concurrency` threads for `seconds`; returns the run's figures.

    Args:
        stub: a `PredictionServiceStub`.
        model: str. The model name.
        texts: list of str. Cycled through, `batch_size` a request.
        concurrency: int. Client threads, each with one request in flight.
        batch_size: int. Texts per request.
        seconds: float. How long the threads send.
        timeout: float. Deadline of each request, seconds.
        metadata: gRPC metadata (`[("authorization", "Bearer KEY")]`) or None.
        signature_name: str.

    Returns:
        dict: `requests` and `texts` answered, `errors` (first error's text in
        `first_error`), `seconds` (from the first thread's start to the last
        one's end), `qps`, `texts_per_s`, `p50_ms`, `p90_ms`, `p99_ms` (NaN
        when nothing was answered).

    Example:

    >>> run_load(stub, "sst2", ["a film"], concurrency=8, batch_size=1, seconds=10)["p90_ms"]
    41.7
    """
    latencies, errors, lock = [], [], threading.Lock()
    until = time.monotonic() + seconds

    def client(index: int) -> None:
        position = index * batch_size
        while time.monotonic() < until:
            batch = [texts[(position + i) % len(texts)] for i in range(batch_size)]
            position += concurrency * batch_size
            start = time.perf_counter()
            try:
                predict(stub, model, {"text": batch}, signature_name, timeout=timeout, metadata=metadata)
            except grpc.RpcError as e:
                with lock:
                    errors.append(f"{e.code().name}: {e.details()}")
                continue
            with lock:
                latencies.append(time.perf_counter() - start)

    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + timeout + 5)
    elapsed = time.monotonic() - start
    ms = np.array(latencies) * 1000.0 if latencies else np.full(1, np.nan)
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return {"requests": len(latencies), "texts": batch_size * len(latencies), "errors": len(errors),
            "first_error": errors[0] if errors else "", "seconds": elapsed, "qps": len(latencies) / elapsed,
            "texts_per_s": batch_size * len(latencies) / elapsed,
            "p50_ms": float(p50), "p90_ms": float(p90), "p99_ms": float(p99)}


def check_models(stub, models: list[str], texts: list[str], batch_size: int, timeout: float = 30.0,
                 metadata=None, signature_name: str = "serving_default") -> None:
    """Sends each model one request of `batch_size` texts: a warm-up, and a check before any load.

    Args:
        stub: a `PredictionServiceStub`.
        models: list of str. The model names.
        texts, batch_size, timeout, metadata, signature_name: as `run_load` takes them.

    Raises:
        SystemExit: naming the first model the server does not answer, with the
            server's reason (an unknown model is NOT_FOUND).
    """
    batch = [texts[i % len(texts)] for i in range(batch_size)]
    for model in models:
        try:
            predict(stub, model, {"text": batch}, signature_name, timeout=timeout, metadata=metadata)
        except grpc.RpcError as e:
            raise SystemExit(f"--models: the server refused a request to model {model!r} "
                             f"(signature {signature_name!r}): {e.code().name}: {e.details()}") from None


def _texts(path: str | None) -> list[str]:
    if path is None:
        return list(SENTENCES)
    with open(path, encoding="utf-8") as f:
        texts = [line.rstrip("\n") for line in f if line.strip()]
    if not texts:
        raise SystemExit(f"--texts_file={path} has no non-empty line.")
    return texts


def positive_ints(text: str) -> list[int]:
    """`"1,8,32"` -> `[1, 8, 32]`; argparse's error for a value below 1 (a flag's `type`)."""
    values = [int(value) for value in text.split(",")]
    if any(value < 1 for value in values):
        raise argparse.ArgumentTypeError(f"{text}: each must be a positive integer")
    return values


def _names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"{text!r}: an empty model name")
    return names


HEADER = ("| model | clients | requests | errors | requests/s | texts/s | p50 ms | p90 ms | p99 ms | load |\n"
          "|---|---|---|---|---|---|---|---|---|---|")


def table_row(model: str, concurrency: int, found: dict) -> str:
    """One Markdown row of `HEADER` for `run_load`'s figures, with the 1-minute load average now."""
    return (f"| {model} | {concurrency} | {found['requests']} | {found['errors']} | {found['qps']:.1f} | "
            f"{found['texts_per_s']:.1f} | {found['p50_ms']:.1f} | {found['p90_ms']:.1f} | "
            f"{found['p99_ms']:.1f} | {os.getloadavg()[0]:.2f} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", default="localhost:8500", help="host:port of the gRPC API")
    parser.add_argument("--models", type=_names, required=True,
                        help="comma-separated model names, run in turn")
    parser.add_argument("--concurrency", type=positive_ints, default=[1, 8, 32],
                        help="comma-separated client thread counts, run in turn")
    parser.add_argument("--batch_size", type=int, default=1, help="texts per request")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each run")
    parser.add_argument("--texts_file", help="one text a line (default: a few built-in sentences)")
    parser.add_argument("--signature_name", default="serving_default")
    parser.add_argument("--timeout", type=float, default=30.0, help="deadline of each request, seconds")
    parser.add_argument("--api_key", help="kbert-serve --api_key: sent as 'authorization: Bearer <key>'")
    args = parser.parse_args(argv)
    if args.batch_size < 1 or args.seconds <= 0:
        parser.error("--batch_size must be >= 1 and --seconds > 0.")
    texts = _texts(args.texts_file)
    metadata = [("authorization", f"Bearer {args.api_key}")] if args.api_key else None
    channel = grpc.insecure_channel(args.server, options=[("grpc.max_receive_message_length", -1)])
    try:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        check_models(stub, args.models, texts, args.batch_size, args.timeout, metadata, args.signature_name)
        print(f"batch_size={args.batch_size}, {args.seconds:g} s a run, {len(texts)} texts, server {args.server}")
        print(HEADER)
        failed = False
        for model in args.models:
            for concurrency in args.concurrency:
                found = run_load(stub, model, texts, concurrency, args.batch_size, args.seconds, args.timeout,
                                 metadata, args.signature_name)
                print(table_row(model, concurrency, found), flush=True)
                if found["errors"]:
                    failed = True
                    print(f"  first error: {found['first_error']}", file=sys.stderr)
    finally:
        channel.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
