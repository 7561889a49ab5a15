"""kbert-serve batching on a realistic length mix: token budget vs request count vs off, same run.

    nice -n 10 python benchmarks/serving_batching.py --seconds 6    # Markdown table on stdout

The question (issue 33): with short and long texts mixed, how close does
kbert-serve at 32 clients come to the model's own best throughput on the same
texts, and at what p99? Texts: SST-2 dev sentences (GLUE, `<data_dir>/glue`)
and passage-like texts cut from WikiText-2's validation articles
(`<data_dir>/corpus/wikitext-2`) to 30-100 words, MS MARCO passages' range
(mean about 56 words); `--passage_share` of the requests are passages (default
a half), in a seeded random order. One text per request, gRPC, 127.0.0.1.

Model: the BERT-tiny SST-2 classifier of `benchmarks/serving_latency.py`
(L=2, H=128, A=2, I=512, bert-base-uncased vocabulary, max_seq_length 128,
random weights: speed does not depend on them), or with `--encoder_dir` the
same classifier on a pre-trained encoder, such as all-MiniLM-L6-v2:

    python -m kbert.bin.convert --source=minilm --output_dir=minilm
    nice -n 10 python benchmarks/serving_batching.py --encoder_dir=minilm

"Model alone" runs the SavedModel in this process over the same texts in
batches of 32 and 64, in arrival order (for `--seconds / 4`) and sorted by
length (one whole pass over every text: timed, a length-ordered run would see
only the shortest texts); the best of these is the ceiling the server's QPS is
divided by. Server settings: batching off; request count
(`serving/batching_parameters.txt`: max_batch_size 32, timeout 0, 2 threads,
`--max_batch_tokens=0`); and the same file with each `--max_batch_tokens` of
`--budgets`. Each setting has its own `kbert-serve`, all started first (an
idle one costs no CPU); then `--rounds` rounds each run every setting in turn
for `--seconds` with `--clients` clients (the model-alone figures before each
round), and the medians are reported: on a shared machine the load moves a
lot within minutes, and interleaving short slices spreads that over all
settings alike. Each setting also reports the CPU its server and the client
threads used while driven (cores busy: CPU seconds per second, from /proc and
`time.process_time`): on a 2-core machine the clients run on the server's
cores, so what they take is CPU the server did not have. Writes
benchmarks/results/serving_batching.json (benchmarks/result_file.py).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import result_file  # noqa: E402
from benchmarks.serving_latency import build_export  # noqa: E402
from benchmarks.serving_latency import drive  # noqa: E402
from benchmarks.serving_latency import sentences  # noqa: E402


def passages(data_dir: str, rng: random.Random, count: int) -> list[str]:
    """`count` passages of 30-100 words cut from WikiText-2's validation paragraphs."""
    path = os.path.join(data_dir, "corpus", "wikitext-2", "valid.txt")
    with open(path, encoding="utf-8") as f:
        paragraphs = [line.split() for line in f if line.strip() and not re.match(r"\s*=", line)]
    found = []
    for words in paragraphs:
        start = 0
        while len(words) - start >= 30:
            size = rng.randint(30, 100)
            found.append(" ".join(words[start:start + size]))
            start += size
    rng.shuffle(found)
    return found[:count]


def length_mix(data_dir: str, passage_share: float, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    short, long = sentences(data_dir), passages(data_dir, rng, count)
    rng.shuffle(short)
    return [long.pop() if rng.random() < passage_share else short[i % len(short)] for i in range(count)]


def token_counts(export_dir: str, texts: list[str]) -> list[int]:
    """WordPiece pieces of each text plus [CLS]/[SEP], cut at 128, as the served model runs them."""
    import tensorflow as tf

    from kbert.data import BertWordpieceTokenizer

    with open(os.path.join(export_dir, "1", "assets.extra", "vocab.txt"), encoding="utf-8") as f:
        vocab = f.read().splitlines()
    pieces = BertWordpieceTokenizer(vocab, do_lower_case=True).tokenize(tf.constant(texts))
    return [min(128, n + 2) for n in pieces.row_lengths().numpy().tolist()]


def model_alone(export_dir: str, texts: list[str], lengths: list[int],
                seconds: float) -> tuple[dict, dict]:
    """Examples/s of the SavedModel in this process on the mix: batches of 32/64, arrival order or sorted.

    Sorted batches (the ceiling) run one whole pass over every text, so the rate
    covers the mix's short and long texts exactly; arrival-order batches (for
    comparison) run for `seconds / 4`, the batches in a seeded random order.
    Returns the rates and the CPU milliseconds per example of each setting.
    """
    import numpy as np

    from kbert.serving.servable import Servable

    servable = Servable("sst2", 1, os.path.join(export_dir, "1"))
    order = {"arrival": list(range(len(texts))), "sorted": sorted(range(len(texts)), key=lengths.__getitem__)}
    rates, cpu_ms = {}, {}
    for name, indices in order.items():
        for size in (32, 64):
            batches = [np.array([texts[i].encode() for i in indices[s:s + size]], dtype=object)
                       for s in range(0, len(indices) - size + 1, size)]
            random.Random(size).shuffle(batches)
            servable.run("serving_default", {"text": batches[0]})
            done, begin, cpu = 0, time.perf_counter(), time.process_time()
            for batch in batches:
                if name == "arrival" and time.perf_counter() - begin >= seconds / 4:
                    break
                servable.run("serving_default", {"text": batch})
                done += size
            rates[f"batch {size}, {name} order"] = done / (time.perf_counter() - begin)
            cpu_ms[f"batch {size}, {name} order"] = 1e3 * (time.process_time() - cpu) / done
    return rates, cpu_ms


def start_server(export_dir: str, extra: list[str], log_path: str):
    from kbert.serving import process

    args = ["--model_name=sst2", f"--model_base_path={export_dir}", "--file_system_poll_wait_seconds=0", *extra]
    try:
        return process.start_server(args, 180, rest_port=0, cwd=REPO, env={"PYTHONPATH": REPO},
                                    log_path=log_path)
    except process.ServerStartError as e:
        sys.exit(f"serving_batching: {e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab_file", default=None, help="Defaults to <data_dir>/vocab/bert-base-uncased-vocab.txt")
    parser.add_argument("--seconds", type=float, default=6.0, help="Measured time per setting.")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--budgets", default="2048,4096,8192,16384", help="--max_batch_tokens values to try.")
    parser.add_argument("--passage_share", type=float, default=0.5, help="Share of requests that are passages.")
    parser.add_argument("--texts", type=int, default=2048, help="Distinct texts in the mix.")
    parser.add_argument("--rounds", type=int, default=1, help="Times each setting runs, in turn; medians reported.")
    parser.add_argument("--encoder_dir", default=None,
                        help="A pre-trained directory for the classifier's encoder (default: BERT-tiny, random).")
    result_file.add_flags(parser, "serving_batching")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    vocab_file = args.vocab_file or os.path.join(args.data_dir, "vocab", "bert-base-uncased-vocab.txt")
    texts = length_mix(args.data_dir, args.passage_share, args.texts, seed=0)
    batching_file = os.path.join(REPO, "serving", "batching_parameters.txt")
    settings = [("off", []), ("request count", ["--enable_batching", f"--batching_parameters_file={batching_file}",
                                                "--max_batch_tokens=0"])]
    settings += [(f"tokens {b}", ["--enable_batching", f"--batching_parameters_file={batching_file}",
                                  f"--max_batch_tokens={b}"]) for b in map(int, args.budgets.split(","))]
    runs, alone_runs = {name: [] for name, _ in settings}, []
    with result_file.scratch_dir(args) as root:
        export_dir = build_export(vocab_file, root, args.encoder_dir)
        lengths = token_counts(export_dir, texts)
        servers = {}
        try:
            for name, extra in settings:
                servers[name] = start_server(export_dir, extra,
                                             os.path.join(root, f"serve-{name.replace(' ', '-')}.log"))
                drive(servers[name].grpc_address, texts, args.clients, 1.0)  # warm up: traces, channels
            for round_ in range(args.rounds):
                alone_runs.append(model_alone(export_dir, texts, lengths, args.seconds))
                for name, server in servers.items():
                    server_cpu, client_cpu = _cpu_seconds(server.process.pid), time.process_time()
                    r = drive(server.grpc_address, texts, args.clients, args.seconds)
                    elapsed = r["requests"] / r["qps"]
                    r["server_cores"] = (_cpu_seconds(server.process.pid) - server_cpu) / elapsed
                    r["client_cores"] = (time.process_time() - client_cpu) / elapsed
                    r["server_cpu_ms"] = 1e3 * r["server_cores"] / r["qps"]
                    runs[name].append(r)
                    print(f"round {round_ + 1} {name:14s}: {r['qps']:8.1f} qps  p50 {r['p50']:7.2f} ms  p99 "
                          f"{r['p99']:7.2f} ms  ({r['requests']} requests, {r['errors']} errors)", file=sys.stderr,
                          flush=True)
        finally:
            for server in servers.values():
                server.stop(timeout_s=60)
    alone = {key: _median([a[key] for a, _ in alone_runs]) for key in alone_runs[0][0]}
    alone_cpu = {key: _median([c[key] for _, c in alone_runs]) for key in alone_runs[0][1]}
    results = {name: {key: _median([r[key] for r in rs])
                      for key in ("qps", "p50", "p99", "server_cores", "client_cores", "server_cpu_ms")}
               | {"requests": sum(r["requests"] for r in rs), "errors": sum(r["errors"] for r in rs),
                  "qps_range": (min(r["qps"] for r in rs), max(r["qps"] for r in rs))}
               for name, rs in runs.items()}
    report(args, texts, lengths, alone, alone_cpu, results)
    write(args, alone, results, load)


def write(args, alone: dict, results: dict, load: float) -> None:
    """The result file: the best token budget against the model's own rate and request count."""
    best = max(alone.values())
    count = results.get("request count")
    budgets = {name: r for name, r in results.items() if name.startswith("tokens")}
    name, top = max(budgets.items(), key=lambda item: item[1]["qps"])
    model = "BERT-tiny" if not args.encoder_dir else os.path.basename(os.path.normpath(args.encoder_dir))
    result_file.write_result(
        args, name="serving_batching", title="Token-budget batching", area="serving",
        load_average_at_start=load,
        headline=f"{model}, {args.clients} clients: a {name.split()[1]}-token batch budget serves "
                 f"{top['qps'] / best:.2f} of the model's own rate, "
                 f"{top['qps'] / count['qps']:.2f}x request-count batching's QPS.",
        reference="request-count batching and the model alone (one length-sorted pass), same run",
        aim=">= 0.8 of the model's own rate, p99 no worse than request-count batching",
        met=top["qps"] / best >= 0.8 and top["p99"] <= count["p99"],
        figures={"model_alone_examples_per_s": alone,
                 "settings": {name: {k: (list(v) if isinstance(v, tuple) else round(v, 2))
                                     for k, v in r.items()} for name, r in results.items()}},
        method=__doc__.split("\n\n", 2)[2])


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads) so far, from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _median(values: list[float]) -> float:
    import numpy as np

    return float(np.median(values))


def report(args, texts, lengths, alone, alone_cpu, results) -> None:
    import numpy as np

    sizes = np.array(lengths)
    words = np.array([len(t.split()) for t in texts])
    best_name = max(alone, key=alone.get)
    best = alone[best_name]
    model = f"encoder {args.encoder_dir}" if args.encoder_dir else "BERT-tiny"
    print(f"## Batching on a length mix ({model}, {args.clients} clients, {args.seconds:g} s per setting, "
          f"{args.passage_share:.0%} passages, median of {args.rounds} round(s))\n")
    from kbert.serving.token_counts import example_tokens

    estimates = example_tokens({"text": np.array([t.encode() for t in texts], dtype=object)}, 128)
    ratio = sizes / estimates
    print(f"Texts: {len(texts)}; words mean {words.mean():.0f} (p50 {np.percentile(words, 50):.0f}, max "
          f"{words.max()}); model tokens (pieces + 2, cut at 128) mean {sizes.mean():.0f}, p50 "
          f"{np.percentile(sizes, 50):.0f}, p90 {np.percentile(sizes, 90):.0f}, at the cut "
          f"{(sizes == 128).mean():.0%}. kbert-serve's estimate (kbert.serving.token_counts) mean "
          f"{estimates.mean():.0f}; real / estimate mean {ratio.mean():.2f}, max {ratio.max():.2f}.\n")
    print("| model alone (in-process) | examples/s | CPU ms per example |\n|---|---:|---:|")
    for name, rate in alone.items():
        print(f"| {name} | {rate:.0f} | {alone_cpu[name]:.2f} |")
    count = results.get("request count")
    print(f"\nBest: {best:.0f} examples/s ({best_name}).\n")
    print("| batching | QPS | (min-max) | QPS / model's best | p50 ms | p99 ms | p99 / request count's | "
          "server CPU cores | server CPU ms per request | clients' CPU cores | requests | errors |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        p99_ratio = f"{r['p99'] / count['p99']:.2f}" if count else "-"
        low, high = r["qps_range"]
        print(f"| {name} | {r['qps']:.1f} | {low:.0f}-{high:.0f} | {r['qps'] / best:.2f} | {r['p50']:.2f} | "
              f"{r['p99']:.2f} | {p99_ratio} | {r['server_cores']:.2f} | {r['server_cpu_ms']:.2f} | "
              f"{r['client_cores']:.2f} | {r['requests']} | {r['errors']} |")


if __name__ == "__main__":
    main()
