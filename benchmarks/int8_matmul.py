"""One int8 projection against float32: the matmul forms of `kbert.layers.int8_dense`, same run.

Times a BERT-base feed-forward projection (768 -> 3072 and 3072 -> 768) as a
`tf.function` over `--rows` rows (tokens) in these arms, rounds alternating,
best of --repeats, and prints each arm's time and its speed against float32:

    float32    `keras.layers.Dense`
    portable   the same layer after `quantize_int8(matmul="portable")`: what
               `kbert-export --quantize=int8` writes (quantize the rows, float32
               matmuls over slices of at most 518 of the contracted axis, int32 sums)
    onednn     after `quantize_int8(matmul="onednn")`: TensorFlow's fused oneDNN
               int8 matmul, only where `onednn_int8_problem()` says it is exact
               (else the line says why it is left out)

It also prints the largest difference between the portable and the fused
answers (both sum the same integers exactly: at most float32 rounding).
`benchmarks/quantization.py` times whole exported models.

    PYTHONPATH=. nice -n 10 python benchmarks/int8_matmul.py [--rows=16,128,2048] [--threads=2]

Writes benchmarks/results/int8_matmul.json (benchmarks/result_file.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks import result_file  # noqa: E402
from kbert.layers import quantize_int8  # noqa: E402
from kbert.layers.int8_dense import onednn_int8_problem  # noqa: E402


def _arms(inputs: int, outputs: int) -> dict:
    """float32, portable and (where exact here) fused int8 copies of one projection."""
    layer = keras.layers.Dense(outputs)
    layer.build((None, inputs))
    forms = ["portable"] + (["onednn"] if onednn_int8_problem() is None else [])
    arms = {"float32": layer}
    for form in forms:
        copy = keras.layers.Dense(outputs)
        copy.build((None, inputs))
        copy.set_weights(layer.get_weights())
        quantize_int8(copy, matmul=form)
        arms[form] = copy
    return {name: tf.function(arm) for name, arm in arms.items()}


def _best_seconds(arms: dict, x: tf.Tensor, repeats: int) -> dict:
    calls = max(1, int(3e8 / int(np.prod(x.shape)) / 768))  # about 0.1-0.3 s a round
    best = {name: float("inf") for name in arms}
    for _ in range(repeats):
        for name, arm in arms.items():
            start = time.perf_counter()
            for _ in range(calls):
                arm(x)
            best[name] = min(best[name], (time.perf_counter() - start) / calls)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="16,128,2048")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: TF's choice)")
    result_file.add_flags(parser, "int8_matmul")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    rows_out = []
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    problem = onednn_int8_problem()
    print(f"CPU: {result_file.machine()['cpu']}; oneDNN's fused int8 matmul: "
          + ("exact here" if problem is None else f"left out: {problem}"))
    rng = np.random.default_rng(0)
    for inputs, outputs in ((768, 3072), (3072, 768)):
        arms = _arms(inputs, outputs)
        for rows in (int(r) for r in args.rows.split(",")):
            x = tf.constant(rng.standard_normal((rows, inputs)).astype(np.float32))
            for arm in arms.values():  # trace and warm up
                arm(x)
            best = _best_seconds(arms, x, args.repeats)
            line = f"{inputs} -> {outputs}, {rows} rows: " + ", ".join(
                f"{name} {seconds * 1e3:.2f} ms ({best['float32'] / seconds:.2f}x float32)"
                for name, seconds in best.items())
            if "onednn" in arms:
                difference = np.abs(arms["portable"](x).numpy() - arms["onednn"](x).numpy()).max()
                line += f"; portable vs onednn max |difference| {difference:.2e}"
            print(line, flush=True)
            rows_out.append({"projection": f"{inputs} -> {outputs}", "rows": rows, **{
                f"{name}_ms": round(seconds * 1e3, 3) for name, seconds in best.items()}, **{
                f"{name}_over_float32": round(best["float32"] / seconds, 2)
                for name, seconds in best.items() if name != "float32"}})
    ratios = [r["portable_over_float32"] for r in rows_out]
    result_file.write_result(
        args, name="int8_matmul", title="Portable int8 matmul vs float32", area="serving",
        load_average_at_start=load,
        headline=f"Portable int8 projection / float32: {min(ratios):.2f}-{max(ratios):.2f}x "
                 f"(BERT-base feed-forward shapes); oneDNN's fused int8 "
                 + ("exact here." if problem is None else "left out here."),
        reference="the same projection in float32 (keras Dense), same run", aim="", met=None,
        figures=rows_out, onednn_int8=problem or "exact here",
        method=__doc__.split("\n\n")[1])


if __name__ == "__main__":
    main()
