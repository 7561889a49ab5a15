"""Serving latency and throughput of kbert-serve: batching off vs on, 1/8/32 concurrent clients.

    python benchmarks/serving_latency.py            # writes a Markdown table to stdout

Builds a small SST-2-shaped classifier (BERT-tiny sizes: L=2, H=128, A=2,
I=512, bert-base-uncased vocabulary, max_seq_length=128), exports it, starts
`kbert-serve` as a subprocess (batching off, then on), and drives it over gRPC
on 127.0.0.1 with N client threads sending one SST-2 dev sentence per request
for a fixed time. Prints p50/p99 latency and QPS, and the QPS ratio of batching
on to off measured in the same run (the target is >= 4x at 32 clients).
Weights are random: speed does not depend on them. Writes
benchmarks/results/serving_latency.json (benchmarks/result_file.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import result_file  # noqa: E402


def sentences(data_dir: str) -> list[str]:
    path = os.path.join(data_dir, "glue", "SST-2", "dev.tsv")
    with open(path, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    return [row[0] for row in rows if row]


def build_export(vocab_file: str, root: str, encoder_dir: str | None = None) -> str:
    """An SST-2-shaped classifier exported to `<root>/export/sst2`; returns that directory.

    The encoder is BERT-tiny with random weights, or, with `encoder_dir`, the
    pre-trained encoder there (with its own vocab.txt; the head stays random).
    """
    import keras

    from kbert.checkpoints import TaskConfig, open_model_dir, save_finetuned
    from kbert.export.saved_model import export_saved_model
    from kbert.models import BertClassifier, BertEncoder

    keras.utils.set_random_seed(0)
    if encoder_dir:
        opened = open_model_dir(encoder_dir)
        encoder, vocab_file = opened.encoder(), opened.vocab_file
    else:
        with open(vocab_file, encoding="utf-8") as f:
            vocabulary_size = len(f.read().split("\n")) - 1
        encoder = BertEncoder(vocabulary_size=vocabulary_size, num_layers=2, num_heads=2,
                              hidden_dim=128, intermediate_dim=512, max_sequence_length=128)
    model_dir = os.path.join(root, "finetuned")
    save_finetuned(model_dir, BertClassifier(encoder, 2),
                   TaskConfig(task="glue", task_name="sst-2", model_type="classifier",
                              label_names=["negative", "positive"], max_seq_length=128),
                   vocab_file)
    export_dir = os.path.join(root, "export", "sst2")
    export_saved_model(model_dir, export_dir, check=False)
    return export_dir


def start_server(export_dir: str, batching_file: str | None, log_path: str,
                 extra_args: tuple = ()):
    """kbert-serve on a free gRPC port, REST off, its log at `log_path`; `extra_args` are more flags."""
    from kbert.serving import process

    args = ["--model_name=sst2", f"--model_base_path={export_dir}", "--file_system_poll_wait_seconds=0",
            *extra_args]
    if batching_file:
        args += ["--enable_batching", f"--batching_parameters_file={batching_file}"]
    try:
        return process.start_server(args, 120, rest_port=0, cwd=REPO, env={"PYTHONPATH": REPO},
                                    log_path=log_path)
    except process.ServerStartError as e:
        sys.exit(f"serving_latency: {e}")


def drive(address: str, texts: list[str], clients: int, seconds: float) -> dict:
    import grpc
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    # One channel per client, as independent callers would have.
    requests = []
    for text in texts:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "sst2"
        request.inputs["text"].CopyFrom(tf.make_tensor_proto([text.encode("utf-8")], dtype=tf.string))
        requests.append(request)
    latencies, errors = [[] for _ in range(clients)], []
    barrier = threading.Barrier(clients + 1)
    stop_at = [0.0]

    def client(index: int) -> None:
        with grpc.insecure_channel(address) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            stub.Predict(requests[index % len(requests)], timeout=60)  # connect + warm up
            barrier.wait()
            i = index
            while time.perf_counter() < stop_at[0]:
                started = time.perf_counter()
                try:
                    stub.Predict(requests[i % len(requests)], timeout=60)
                except grpc.RpcError as e:
                    errors.append(e.code().name)
                latencies[index].append(time.perf_counter() - started)
                i += clients

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    stop_at[0] = time.perf_counter() + 3600
    barrier.wait()
    begin = time.perf_counter()
    stop_at[0] = begin + seconds
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - begin
    all_latencies = np.concatenate([np.asarray(x) for x in latencies]) * 1e3
    return {"qps": len(all_latencies) / elapsed, "p50": float(np.percentile(all_latencies, 50)),
            "p99": float(np.percentile(all_latencies, 99)), "requests": len(all_latencies),
            "errors": len(errors)}


def model_alone(export_dir: str, texts: list[str], seconds: float) -> dict:
    """Examples/s of the SavedModel called in this process at batch 1 and 32: the batching ceiling."""
    import numpy as np

    from kbert.serving.servable import Servable

    servable = Servable("sst2", 1, os.path.join(export_dir, "1"))
    rates = {}
    for batch in (1, 32):
        inputs = {"text": np.array([t.encode("utf-8") for t in texts[:batch]], dtype=object)}
        servable.run("serving_default", inputs)
        calls, begin = 0, time.perf_counter()
        while time.perf_counter() - begin < seconds / 2:
            servable.run("serving_default", inputs)
            calls += 1
        rates[batch] = batch * calls / (time.perf_counter() - begin)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab_file", default=None, help="Defaults to <data_dir>/vocab/bert-base-uncased-vocab.txt")
    parser.add_argument("--seconds", type=float, default=8.0, help="Measured time per setting.")
    parser.add_argument("--clients", default="1,8,32")
    result_file.add_flags(parser, "serving_latency")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    vocab_file = args.vocab_file or os.path.join(args.data_dir, "vocab", "bert-base-uncased-vocab.txt")
    texts = sentences(args.data_dir)
    concurrency = [int(c) for c in args.clients.split(",")]
    with result_file.scratch_dir(args) as root:
        export_dir = build_export(vocab_file, root)
        alone = model_alone(export_dir, texts, args.seconds)
        batching_file = os.path.join(REPO, "serving", "batching_parameters.txt")
        results = {}
        for mode, batching in (("off", None), ("on", batching_file)):
            server = start_server(export_dir, batching, os.path.join(root, f"serve-batching-{mode}.log"))
            try:
                for clients in concurrency:
                    results[(mode, clients)] = drive(server.grpc_address, texts, clients, args.seconds)
                    r = results[(mode, clients)]
                    print(f"batching {mode:3s} clients {clients:3d}: {r['qps']:8.1f} qps  p50 {r['p50']:7.2f} ms"
                          f"  p99 {r['p99']:7.2f} ms  ({r['requests']} requests, {r['errors']} errors)",
                          file=sys.stderr, flush=True)
            finally:
                server.stop(timeout_s=60)
    print("| batching | clients | QPS | p50 ms | p99 ms | requests | errors | QPS vs batching off |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for (mode, clients), r in results.items():
        ratio = r["qps"] / results[("off", clients)]["qps"]
        print(f"| {mode} | {clients} | {r['qps']:.1f} | {r['p50']:.2f} | {r['p99']:.2f} | {r['requests']} | "
              f"{r['errors']} | {ratio:.2f}x |")
    print(f"\nModel alone (in-process, no server): {alone[1]:.0f} examples/s at batch 1, "
          f"{alone[32]:.0f} at batch 32 ({alone[32] / alone[1]:.2f}x: the most batching can give here).")
    base = results[("off", 1)]["qps"]
    most = max(concurrency)
    on, off = results[("on", most)], results[("off", most)]
    print(f"QPS at {most} clients with batching vs one-at-a-time (batching off, 1 client): "
          f"{on['qps'] / base:.2f}x")
    result_file.write_result(
        args, name="serving_latency", title="kbert-serve latency and throughput", area="serving",
        load_average_at_start=load,
        headline=f"BERT-tiny, {most} clients: batching serves {on['qps']:.0f} QPS = "
                 f"{on['qps'] / base:.2f}x one-at-a-time, {on['qps'] / off['qps']:.2f}x batching "
                 f"off; the model alone caps at {alone[32] / alone[1]:.2f}x.",
        reference="kbert-serve without batching (1 client and the same clients) and the model "
                  "alone, same run",
        aim=f">= 4x one-at-a-time QPS at {most} clients with batching", met=on["qps"] / base >= 4,
        figures={"runs": [{"batching": mode, "clients": clients, **{k: round(v, 2) for k, v in r.items()}}
                          for (mode, clients), r in results.items()],
                 "model_alone_examples_per_s": {f"batch_{b}": round(v, 1) for b, v in alone.items()}},
        method=__doc__.split("\n\n", 2)[2])


if __name__ == "__main__":
    main()
