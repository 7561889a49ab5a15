"""kbert-serve under normal load with abusive requests mixed in: does one request hurt the others?

    python benchmarks/serving_load.py                       # Markdown report on stdout
    python benchmarks/serving_load.py --ner_text_bytes=40000 --seconds=15

Exports two tiny models (tests/serving_testlib.py: a classifier and an NER
model, real tokenization with the test vocabulary), starts `kbert-serve` with
its default limits as a subprocess on 127.0.0.1 (under an address-space cap,
`--server_memory_limit_gb`, so a request that runs away cannot take this shared
machine down with it), and runs normal traffic from 8 client threads (gRPC
classifier requests and REST NER requests, one short sentence each) twice for
`--seconds`: alone, then with the issue's abusive requests interleaved:

- 300 connections announcing a 1 MB body and sending nothing (held for the phase),
- a 10,000-string batch (gRPC and REST),
- a 200,000-deep nested JSON body,
- a half-copied model version (`saved_model.pb` first, the rest later),
- one `--ner_text_bytes` (default 1 MB) text to the NER model, last.

Reports the server's peak RSS, errors on the normal traffic (the goal is 0),
p50/p99 latency of the normal traffic with and without the abuse (and their
ratio, measured in this run), what each abusive request got, and whether the
server was alive at the end. Everything is bounded: fixed phase lengths,
30 s timeouts on every call, loopback only. Writes
benchmarks/results/serving_load.json (benchmarks/result_file.py); the models use
the tests' data, so --data_dir goes unused.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import result_file  # noqa: E402

CLIENTS = 8
TIMEOUT = 30.0
SENTENCES = ["a gorgeous , witty film", "John lives in Paris , France .", "the plot is thin and the acting dull",
             "Angela Merkel met Emmanuel Macron in Berlin .", "one of the best films of the year"]


def export_models(root: str) -> dict:
    from tests import serving_testlib as lib

    return {"sst2": lib.export_task("sst2", root, seed=0), "ner": lib.export_task("ner", root, seed=3)}


class Server:
    """kbert-serve in a subprocess with an address-space cap; samples its RSS."""

    def __init__(self, config: str, memory_limit_gb: float, log_path: str):
        from kbert.serving import process

        limit = int(memory_limit_gb * (1 << 30))

        def cap():  # runs in the child before exec
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        try:
            self.started = process.start_server(
                [f"--model_config_file={config}", "--file_system_poll_wait_seconds=0.5"], 120,
                cwd=REPO, env={"PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "3"}, log_path=log_path,
                preexec_fn=cap)
        except process.ServerStartError as e:
            sys.exit(f"serving_load: {e}")
        self.process = self.started.process
        self.grpc_port, self.rest_port = self.started.grpc_port, self.started.rest_port
        self.peak_rss = self.rss()
        self.peak_threads = self.ready_threads = self._status("Threads")
        self._sampling = True
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _status(self, field: str) -> int:
        try:
            with open(f"/proc/{self.process.pid}/status") as f:
                return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))
        except (OSError, StopIteration):
            return 0

    def rss(self) -> int:
        """Resident bytes now; 0 once the process is gone."""
        return self._status("VmRSS") * 1024

    def hwm(self) -> int:
        """The kernel's own peak RSS (VmHWM), or the sampled peak once the process is gone."""
        return self._status("VmHWM") * 1024 or self.peak_rss

    def _sample(self) -> None:
        while self._sampling and self.process.poll() is None:
            self.peak_rss = max(self.peak_rss, self.rss())
            self.peak_threads = max(self.peak_threads, self._status("Threads"))
            time.sleep(0.05)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> int | None:
        self._sampling = False
        return self.started.stop(timeout_s=60)


def _post(url: str, body: bytes, timeout: float = TIMEOUT) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _grpc_predict(stub, model: str, texts: list[str], timeout: float = TIMEOUT):
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.inputs["text"].CopyFrom(tf.make_tensor_proto(np.array([t.encode() for t in texts], dtype=object)))
    return stub.Predict(request, timeout=timeout)


def normal_traffic(server: Server, seconds: float, busy=lambda: False) -> dict:
    """8 clients, each alternating a gRPC classifier request and a REST NER request.

    They run for `seconds`, and on while `busy()` (at most 300 s more).
    """
    import grpc
    import numpy as np
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    latencies, errors = [[] for _ in range(CLIENTS)], []
    rest = f"http://127.0.0.1:{server.rest_port}/v1/models/ner:predict"
    stop_at, hard_stop = time.perf_counter() + seconds, time.perf_counter() + seconds + 300

    def running() -> bool:
        now = time.perf_counter()
        return now < stop_at or (busy() and now < hard_stop)

    def client(index: int) -> None:
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            i = index
            while running():
                text = SENTENCES[i % len(SENTENCES)]
                started = time.perf_counter()
                try:
                    if i % 2:
                        status, body = _post(rest, json.dumps({"instances": [text]}).encode())
                        if status != 200:
                            raise OSError(f"HTTP {status}: {body[:120]}")
                    else:
                        _grpc_predict(stub, "sst2", [text])
                    latencies[index].append(time.perf_counter() - started)  # answered requests only
                except grpc.RpcError as e:
                    errors.append(f"gRPC {e.code().name}: {e.details()[:120]}")
                except OSError as e:
                    errors.append(f"REST {type(e).__name__}: {e}")
                i += CLIENTS

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    begin = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - begin
    answered = np.concatenate([np.asarray(x, dtype=float) for x in latencies]) * 1e3
    p50, p99 = np.percentile(answered, [50, 99]) if len(answered) else (float("nan"), float("nan"))
    return {"requests": len(answered) + len(errors), "errors": errors, "p50": float(p50), "p99": float(p99),
            "seconds": elapsed, "qps": len(answered) / elapsed}


def _timed(name: str, outcomes: list, action) -> None:
    started = time.perf_counter()
    try:
        result = action()
    except Exception as e:  # recorded: the report says what each abusive request got
        result = f"{type(e).__name__}: {str(e)[:160]}"
    outcomes.append((name, result, time.perf_counter() - started))


def abuse(server: Server, half_dir: str, source_version: str, ner_text_bytes: int, outcomes: list,
          slow: list, pause: float) -> None:
    """The issue's abusive requests, one after another with `pause` seconds of normal traffic between."""
    import grpc
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    rest = f"http://127.0.0.1:{server.rest_port}/v1/models"

    def slow_connections():
        for _ in range(300):
            sock = socket.create_connection(("127.0.0.1", server.rest_port), timeout=TIMEOUT)
            sock.sendall(b"POST /v1/models/sst2:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
            slow.append(sock)
        return "300 open, sending nothing"

    def big_batch_grpc():
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            try:
                _grpc_predict(prediction_service_pb2_grpc.PredictionServiceStub(channel), "sst2",
                              [SENTENCES[i % 5] for i in range(10_000)])
                return "OK (answered in full)"
            except grpc.RpcError as e:
                return f"{e.code().name}: {e.details()[:110]}"

    def big_batch_rest():
        status, body = _post(f"{rest}/sst2:predict",
                             json.dumps({"instances": [SENTENCES[i % 5] for i in range(10_000)]}).encode())
        return f"HTTP {status}: {body[:110]}"

    def deep_json():
        status, body = _post(f"{rest}/sst2:predict",
                             b'{"instances": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")
        return f"HTTP {status}: {body[:110]}"

    def half_copied():
        target = os.path.join(half_dir, "2")
        os.makedirs(target)
        shutil.copy(os.path.join(source_version, "saved_model.pb"), target)
        deadline = time.monotonic() + 30
        first = "no status"
        while time.monotonic() < deadline:
            status = _version_state(rest, "half", 2)
            if status and status["state"] == "END":
                first = f"END, status says: {status['status']['error_message'].split('): ', 1)[-1][:90]}..."
                break
            time.sleep(0.2)
        for name in os.listdir(source_version):
            if name != "saved_model.pb":
                path = os.path.join(source_version, name)
                (shutil.copytree if os.path.isdir(path) else shutil.copy)(path, os.path.join(target, name))
        while time.monotonic() < deadline:
            status = _version_state(rest, "half", 2)
            if status and status["state"] == "AVAILABLE":
                return f"first {first}; then AVAILABLE without restart"
            time.sleep(0.2)
        return f"first {first}; not AVAILABLE within 30 s"

    def ner_text():
        text = " ".join(SENTENCES[i % 5] for i in range(ner_text_bytes // 20))[:ner_text_bytes]
        status, body = _post(f"{rest}/ner:predict", json.dumps({"instances": [text]}).encode(), timeout=120)
        return f"HTTP {status}: {body[:110]}"

    for name, action in (("300 slow connections", slow_connections), ("10,000-string batch, gRPC", big_batch_grpc),
                         ("10,000-string batch, REST", big_batch_rest), ("200,000-deep JSON", deep_json),
                         ("half-copied version", half_copied),
                         (f"{ner_text_bytes:,}-byte NER text, REST", ner_text)):
        _timed(name, outcomes, action)
        time.sleep(pause)


def _version_state(rest: str, model: str, version: int):
    try:
        with urllib.request.urlopen(f"{rest}/{model}", timeout=TIMEOUT) as reply:
            return {int(s["version"]): s for s in json.load(reply)["model_version_status"]}.get(version)
    except (OSError, ValueError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="Length of each phase of normal traffic.")
    parser.add_argument("--ner_text_bytes", type=int, default=1_000_000, help="Size of the one long NER text.")
    parser.add_argument("--server_memory_limit_gb", type=float, default=6.0,
                        help="Address-space cap of the server process (protects the machine).")
    result_file.add_flags(parser, "serving_load")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with result_file.scratch_dir(args, prefix="kbert-load-") as root:
        models = export_models(root)
        half = os.path.join(root, "half")
        shutil.copytree(models["sst2"]["version_dir"], os.path.join(half, "1"))
        config = os.path.join(root, "models.config")
        with open(config, "w") as f:
            f.write("model_config_list {\n" + "".join(
                f'  config {{ name: "{name}" base_path: "{path}" }}\n' for name, path in
                (("sst2", models["sst2"]["export_dir"]), ("ner", models["ner"]["export_dir"]), ("half", half)))
                + "}\n")
        server = Server(config, args.server_memory_limit_gb, os.path.join(root, "kbert-serve.log"))
        started_rss = server.rss()
        try:
            normal_traffic(server, 2.0)  # warm up: first calls trace and allocate
            quiet = normal_traffic(server, args.seconds)
            quiet_rss, quiet_threads = server.peak_rss, server.peak_threads
            outcomes, slow = [], []
            abuser = threading.Thread(target=abuse, args=(server, half, models["sst2"]["version_dir"],
                                                          args.ner_text_bytes, outcomes, slow, args.seconds / 8))
            abuser.start()
            loaded = normal_traffic(server, args.seconds, busy=abuser.is_alive)
            abuser.join(timeout=60)
            for sock in slow:
                sock.close()
            alive = server.alive()
            if alive:
                check = normal_traffic(server, 1.0)
                alive = not check["errors"]
            peak = max(server.hwm(), server.peak_rss)
            threads = (server.ready_threads, quiet_threads, server.peak_threads)
        finally:
            code = server.stop()
            log_tail = server.started.log_text()[-600:]
    report(args, quiet, loaded, outcomes, (started_rss, quiet_rss, peak), threads, alive, code, log_tail)
    mb = 1 << 20
    result_file.write_result(
        args, name="serving_load", title="kbert-serve under abuse", area="serving",
        load_average_at_start=load,
        headline=f"Abuse mixed into {CLIENTS} clients' traffic ({args.ner_text_bytes:,}-byte NER text "
                 f"included): {len(loaded['errors'])} errors, server peak {peak / mb:,.0f} MB, "
                 f"{'alive' if alive else 'NOT alive'} at the end.",
        reference=f"the same {CLIENTS} clients' traffic alone, same run",
        aim="0 errors and the server alive under abuse", met=alive and not loaded["errors"],
        figures={"errors": len(loaded["errors"]), "alive_at_end": alive,
                 "p50_p99_vs_alone": [round(loaded["p50"] / quiet["p50"], 2),
                                      round(loaded["p99"] / quiet["p99"], 2)],
                 "server_rss_mb": {"ready": round(started_rss / mb), "normal_peak": round(quiet_rss / mb),
                                   "peak": round(peak / mb)},
                 "threads": {"ready": threads[0], "normal_peak": threads[1], "peak": threads[2]},
                 "abusive_requests": [{"request": name, "answer": str(result)[:200],
                                       "seconds": round(seconds, 2)} for name, result, seconds in outcomes]},
        method=__doc__.split("\n\n", 2)[2])


def report(args, quiet, loaded, outcomes, rss, threads, alive, code, log_tail) -> None:
    started_rss, quiet_rss, peak = rss
    mb = 1 << 20
    print(f"## kbert-serve under load with abuse ({CLIENTS} clients, {args.seconds:g} s per phase, "
          f"NER text {args.ner_text_bytes:,} bytes, server capped at {args.server_memory_limit_gb:g} GB)\n")
    print("| normal traffic | seconds | requests | answered QPS | errors | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in (("alone", quiet), ("with the abuse", loaded)):
        print(f"| {name} | {r['seconds']:.1f} | {r['requests']} | {r['qps']:.1f} | {len(r['errors'])} | "
              f"{r['p50']:.1f} | {r['p99']:.1f} |")
    print(f"\n(latencies of answered requests.) p50 with abuse / alone: {loaded['p50'] / quiet['p50']:.2f}x; "
          f"p99: {loaded['p99'] / quiet['p99']:.2f}x")
    print("\n| abusive request | answer | seconds |\n|---|---|---:|")
    for name, result, seconds in outcomes:
        print(f"| {name} | {str(result).replace('|', '/')} | {seconds:.2f} |")
    print(f"\nServer RSS: {started_rss / mb:.0f} MB when ready, peak {quiet_rss / mb:.0f} MB under normal "
          f"traffic, peak {peak / mb:.0f} MB in all.")
    print(f"Server threads: {threads[0]} when ready, peak {threads[1]} under normal traffic, peak {threads[2]} "
          "in all.")
    print(f"Server alive at the end: {'yes' if alive else 'NO'} (exit status after SIGTERM: {code}).")
    if loaded["errors"]:
        kinds = sorted({e.split(':')[0] for e in loaded["errors"]})
        print(f"Errors on normal traffic with the abuse: {len(loaded['errors'])} ({', '.join(kinds)}); first: "
              f"{loaded['errors'][0]}")
    if not alive:
        print(f"Server's last words: {log_tail.strip()[-400:]!r}")


if __name__ == "__main__":
    main()
