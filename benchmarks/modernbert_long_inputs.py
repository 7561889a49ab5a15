"""ModernBERT on long inputs: peak memory and time of one forward pass, linear attention vs full.

    PYTHONPATH=. python benchmarks/modernbert_long_inputs.py                       # base, 512..8192
    PYTHONPATH=. python benchmarks/modernbert_long_inputs.py --lengths=512,1024 --size=tiny

For each length, a fresh process builds a ModernBERT-base-shaped encoder (22
layers, width 768, 12 heads, GeGLU 1,152, window 128, a global layer every
third; random weights, batch 1) and runs one inference forward pass twice (the
first traces); it reports the second pass's wall time and the process's peak
resident memory above what it held once the model was built. Two attention
implementations, the same weights and inputs:

- `linear`: kbert's (`kbert/models/modernbert/modernbert_attention.py`): local
  layers in sliding-window blocks, global layers a chunk of 512 queries at a
  time; no `[heads, T, T]` tensor beyond one chunk.
- `full`: every layer through `plain_attention`, the textbook formula that
  materialises `[heads, T, T]` scores (band-masked in local layers), as an
  implementation without either trick would. It is the same layer code with
  its two attention functions swapped for the plain one, in its own process.

The growth exponent of each is the least-squares slope of log(value) on
log(length) over the lengths run. It also times one local layer alone, whose
cost should grow linearly with length (exponent ~1). Aim (issue #31): at 8,192
tokens, linear attention's memory at most a quarter of full attention's.
Writes benchmarks/results/modernbert_long_inputs.json (benchmarks/result_file.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import result_file  # noqa: E402

SIZES = {  # num_layers, hidden_dim, num_heads, intermediate_dim
    "base": (22, 768, 12, 1152),
    "tiny": (3, 64, 2, 96),
}
VOCABULARY = 50368


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _current_rss_mib() -> float:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def worker(mode: str, size: str, length: int) -> dict:
    """One forward pass at `length` in this process; returns seconds and memory."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    from kbert.models.modernbert import modernbert_encoder_layer as layer_module
    from kbert.models.modernbert.modernbert_attention import plain_attention
    from kbert.models.modernbert.modernbert_encoder import ModernBertEncoder

    if mode == "full":
        # The reference: the same layers with the plain formula everywhere.
        layer_module.local_block_attention = (
            lambda q, k, v, ids, radius: plain_attention(q, k, v, ids, radius)[0])
        layer_module.chunked_global_attention = (
            lambda q, k, v, ids, chunk: plain_attention(q, k, v, ids)[0])
    num_layers, hidden, heads, intermediate = SIZES[size]
    tf.keras.utils.set_random_seed(0)
    encoder = ModernBertEncoder(
        vocabulary_size=VOCABULARY, num_layers=num_layers, num_heads=heads, hidden_dim=hidden,
        intermediate_dim=intermediate, max_sequence_length=max(8192, length))
    rng = np.random.default_rng(0)
    inputs = {"token_ids": tf.constant(rng.integers(5, VOCABULARY, (1, length)), tf.int32),
              "padding_mask": tf.ones((1, length), tf.int32),
              # Unused by ModernBERT (no segment embedding); kept for BertEncoder's interface.
              "segment_ids": tf.zeros((1, length), tf.int32)}
    forward = tf.function(lambda x: encoder(x, training=False)["sequence_output"])
    built_rss = _current_rss_mib()
    forward(inputs).numpy()  # traces
    start = time.perf_counter()
    forward(inputs).numpy()
    seconds = time.perf_counter() - start
    peak = _peak_rss_mib() - built_rss
    # One local layer alone (layer 1: ModernBERT's layer 0 is global).
    layer = encoder.get_layer("transformer_layer_1")
    hidden_states = tf.random.normal((1, length, hidden))
    positions = tf.range(length)[None]
    run_layer = tf.function(lambda x: layer(x, position_ids=positions, attention_ids=inputs[
        "padding_mask"], training=False))
    run_layer(hidden_states).numpy()
    start = time.perf_counter()
    run_layer(hidden_states).numpy()
    return {"mode": mode, "length": length, "seconds": seconds, "peak_mib": peak,
            "local_layer_seconds": time.perf_counter() - start}


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of log(y) on log(x)."""
    xs = [math.log(x) for x, _ in points]
    ys = [math.log(max(y, 1e-9)) for _, y in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    return (sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys))
            / sum((x - mean_x) ** 2 for x in xs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="base", choices=sorted(SIZES))
    parser.add_argument("--lengths", default="512,1024,2048,4096,8192")
    parser.add_argument("--modes", default="linear,full")
    parser.add_argument("--timeout_s", type=int, default=1800, help="Per process.")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    result_file.add_flags(parser, "modernbert_long_inputs")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    if args.worker:
        mode, length = args.worker.split(":")
        print(json.dumps(worker(mode, args.size, int(length))))
        return
    lengths = [int(v) for v in args.lengths.split(",")]
    modes = args.modes.split(",")
    print(f"ModernBERT {args.size} {SIZES[args.size]}, batch 1, one forward pass per fresh "
          f"process; cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}", flush=True)
    results: dict[tuple[str, int], dict] = {}
    env = {**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "2"}
    for length in lengths:
        for mode in modes:
            started = time.time()
            done = subprocess.run(
                [sys.executable, __file__, f"--size={args.size}", f"--worker={mode}:{length}"],
                capture_output=True, text=True, timeout=args.timeout_s, env=env)
            if done.returncode:
                print(f"{mode:>6} {length:>5}: failed (rc {done.returncode}): "
                      f"{done.stderr.strip().splitlines()[-1:]}", flush=True)
                continue
            result = json.loads(done.stdout.strip().splitlines()[-1])
            results[mode, length] = result
            print(f"{mode:>6} {length:>5}: {result['seconds']:8.2f} s, peak +{result['peak_mib']:8.0f} "
                  f"MiB, one local layer {result['local_layer_seconds'] * 1000:8.1f} ms "
                  f"({time.time() - started:.0f} s with start-up)", flush=True)
    print("\n| mode | " + " | ".join(f"{n:,}" for n in lengths) + " | exponent |")
    print("|---|" + "---:|" * (len(lengths) + 1))
    for key, label, scale in (("seconds", "s", 1), ("peak_mib", "MiB", 1),
                              ("local_layer_seconds", "ms, one local layer", 1000)):
        for mode in modes:
            points = [(n, results[mode, n][key]) for n in lengths if (mode, n) in results]
            cells = [f"{results[mode, n][key] * scale:.1f}" if (mode, n) in results else "-"
                     for n in lengths]
            exponent = f"{slope(points):.2f}" if len(points) >= 2 else "-"
            print(f"| {mode} ({label}) | " + " | ".join(cells) + f" | {exponent} |")
    longest = max(lengths)
    if ("linear", longest) in results and ("full", longest) in results:
        linear, full = results["linear", longest], results["full", longest]
        memory, seconds = linear["peak_mib"] / full["peak_mib"], linear["seconds"] / full["seconds"]
        print(f"\nat {longest:,} tokens: linear / full memory {memory:.3f} "
              f"(aim <= 0.25), time {seconds:.2f}")
        result_file.write_result(
            args, name="modernbert_long_inputs", title="ModernBERT on long inputs",
            area="pre-training", load_average_at_start=load,
            headline=f"{args.size.capitalize()}-shaped ModernBERT, one forward pass at {longest:,} "
                     f"tokens: {memory:.3f}x full attention's memory, {seconds:.2f}x its time.",
            reference="the same layers with full attention everywhere, same weights and inputs, "
                      "same run",
            aim=f"<= 0.25x full attention's memory at {longest:,} tokens", met=memory <= 0.25,
            figures={"memory_ratio": round(memory, 3), "time_ratio": round(seconds, 2),
                     "exponents": {f"{mode} {key}": round(slope(
                         [(n, results[mode, n][key]) for n in lengths if (mode, n) in results]), 2)
                         for mode in modes for key in ("seconds", "peak_mib", "local_layer_seconds")},
                     "runs": [{"mode": mode, "length": n, **values}
                              for (mode, n), values in results.items()]},
            method=__doc__.split("\n\n", 2)[2])


if __name__ == "__main__":
    main()
