"""Pre-training throughput: kbert's training step vs keras-hub's BERT, same shapes, same process.

    PYTHONPATH=. python benchmarks/pretraining_throughput.py --configs=tiny,mini \\
        --dtypes=float32,mixed_bfloat16

For each size the reference is keras-hub's `BertBackbone` + `MaskedLMHead`
(tied) + a Dense NSP head trained as Keras' own `fit` runs it: the compiled
`train_function`, traced once, on a `tf.data` iterator (Keras AdamW, the same
weight decay and clipping); kbert is `BertPretrainer` stepped by the loop
`kbert-pretrain` runs (one traced `tf.function`). The XLA setting is the same
for both (`--jit_compile`, off by default: Keras' "auto" would compile the
reference alone on some machines). Both see one fixed batch (seq 128, batch
16, 20 predictions, vocabulary 30522) already in tensors, so input reading is
not measured; their steps alternate and each one's fastest step counts, as
the machine may be shared. Model FLOPs
utilisation (MFU) divides 6 x matmul parameters x tokens + attention + MLM
head FLOPs by a matmul peak measured in this run for the same dtype.
Writes benchmarks/results/pretraining_throughput.json (benchmarks/result_file.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks import result_file  # noqa: E402
from kbert.models import BertEncoder  # noqa: E402
from kbert.models import BertPretrainer  # noqa: E402
from kbert.training import create_optimizer  # noqa: E402
from kbert.training.pretraining.step import make_train_loop  # noqa: E402

SIZES = {  # L, H, A, I
    "tiny": (2, 128, 2, 512),
    "mini": (4, 256, 4, 1024),
    "small": (4, 512, 8, 2048),
    "base": (12, 768, 12, 3072),
}
STEPS = {"tiny": 30, "mini": 15, "small": 8, "base": 4}
VOCAB, POSITIONS, BATCH, SEQ, PREDICTIONS = 30522, 512, 16, 128, 20


def batch(seed=0):
    rng = np.random.default_rng(seed)
    features = {
        "token_ids": rng.integers(5, VOCAB, (BATCH, SEQ)).astype("int32"),
        "segment_ids": np.repeat([[0] * (SEQ // 2) + [1] * (SEQ // 2)], BATCH, 0).astype("int32"),
        "padding_mask": np.ones((BATCH, SEQ), "int32"),
        "mask_positions": np.sort(rng.choice(SEQ, (BATCH, PREDICTIONS)), axis=1).astype("int32"),
    }
    labels = {"mlm": rng.integers(5, VOCAB, (BATCH, PREDICTIONS)).astype("int32"),
              "nsp": rng.integers(0, 2, (BATCH, 1)).astype("int32")}
    weights = {"mlm": np.ones((BATCH, PREDICTIONS), "float32"), "nsp": np.ones((BATCH,), "float32")}
    return features, labels, weights


def model_flops(L, H, I):
    """Training FLOPs of one step: 6 x matmul params x tokens + attention + MLM head."""
    tokens = BATCH * SEQ
    matmul_params = L * (4 * H * H + 2 * H * I)
    attention = 6 * L * 2 * 2 * BATCH * SEQ * SEQ * H  # QK^T and AV, forward + backward
    mlm_head = 6 * BATCH * PREDICTIONS * (H * H + H * VOCAB)
    return 6 * matmul_params * tokens + attention + mlm_head


def matmul_peak(dtype, n=2048, repeats=10):
    """FLOP/s of the fastest of `repeats` n x n matmuls in `dtype`."""
    a = tf.cast(tf.random.normal((n, n), dtype="float32"), dtype)
    matmul = tf.function(lambda x: tf.matmul(x, x))
    matmul(a).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def keras_hub_model(L, H, A, I, jit_compile):
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=VOCAB, num_layers=L, num_heads=A, hidden_dim=H, intermediate_dim=I,
        max_sequence_length=POSITIONS)
    inputs = dict(backbone.input)
    inputs["mask_positions"] = keras.Input((None,), dtype="int32", name="mask_positions")
    head = keras_hub.layers.MaskedLMHead(token_embedding=backbone.token_embedding,
                                         intermediate_activation="gelu")
    encoded = backbone({k: inputs[k] for k in ("token_ids", "segment_ids", "padding_mask")})
    mlm = keras.layers.Activation("linear", dtype="float32")(
        head(encoded["sequence_output"], mask_positions=inputs["mask_positions"]))
    nsp = keras.layers.Dense(2, dtype="float32")(encoded["pooled_output"])
    model = keras.Model(inputs, {"mlm": mlm, "nsp": nsp})
    optimizer = keras.optimizers.AdamW(1e-4, weight_decay=0.01, epsilon=1e-6, global_clipnorm=1.0)
    optimizer.exclude_from_weight_decay(var_names=["layer_norm", "bias"])
    model.compile(optimizer=optimizer, loss={
        "mlm": keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                          reduction="mean_with_sample_weight"),
        "nsp": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
        jit_compile=jit_compile)
    # What `fit` runs each step: the compiled train function on a tf.data
    # iterator (not `train_on_batch`, which converts numpy arrays every call).
    iterator = iter(tf.data.Dataset.from_tensors(batch()).repeat())
    model.make_train_function()  # sets model.train_function, as fit does
    train_function = model.train_function
    return lambda: tf.nest.map_structure(lambda t: t.numpy(), train_function(iterator))


def kbert_model(L, H, A, I, jit_compile):
    pretrainer = BertPretrainer(BertEncoder(
        vocabulary_size=VOCAB, num_layers=L, num_heads=A, hidden_dim=H, intermediate_dim=I,
        max_sequence_length=POSITIONS))
    optimizer = create_optimizer(1e-4, num_train_steps=10000)
    optimizer.build(pretrainer.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64)
    data = tuple(tf.nest.map_structure(tf.constant, part) for part in batch())
    train_loop, _ = make_train_loop(
        tf.distribute.get_strategy(), pretrainer, optimizer, step, 1, jit_compile, lambda: data)
    one = tf.constant(1, tf.int32)
    return lambda: train_loop(one)[0].numpy()


def seconds_per_step(steps_by_name, rounds, warmup=2):
    """Alternates one step of each model per round; returns each one's fastest step.

    The machine is shared, so steps are interleaved (both models see the same
    contention) and the best of `rounds` estimates the uncontended time. Each
    model first runs `warmup` untimed steps (the first one traces).
    """
    for step in steps_by_name.values():
        for _ in range(warmup):
            step()
    best = {name: float("inf") for name in steps_by_name}
    for _ in range(rounds):
        for name, step in steps_by_name.items():
            start = time.perf_counter()
            step()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="tiny,mini,small,base")
    parser.add_argument("--dtypes", default="float32,mixed_bfloat16")
    parser.add_argument("--jit_compile", action="store_true",
                        help="XLA-compile both steps (the same setting for both).")
    parser.add_argument("--steps_scale", type=float, default=1.0,
                        help="Multiply the timed rounds per config (more = steadier).")
    result_file.add_flags(parser, "pretraining_throughput")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    dtypes = args.dtypes.split(",")
    peaks = {d: matmul_peak("bfloat16" if "bfloat16" in d else "float32") for d in dtypes}
    print(f"tensorflow {tf.__version__}, keras {keras.__version__}, keras-hub "
          f"{keras_hub.__version__}; batch {BATCH}, seq {SEQ}, predictions {PREDICTIONS}; "
          f"XLA {'on' if args.jit_compile else 'off'} for both; reference: keras-hub's model "
          "through Keras' compiled train function on a tf.data iterator")
    print(f"{'config':<8}{'dtype':<16}{'keras-hub seq/s':>16}{'kbert seq/s':>13}{'ratio':>7}"
          f"{'MFU hub':>9}{'MFU kbert':>11}")
    throughput = {}  # (config, dtype) -> (keras-hub seq/s, kbert seq/s)
    for config in args.configs.split(","):
        L, H, A, I = SIZES[config]
        steps = max(2, int(STEPS[config] * args.steps_scale))
        flops = model_flops(L, H, I)
        # Re-measured per config and the best kept: a shared machine depresses
        # any single measurement.
        for d in dtypes:
            peaks[d] = max(peaks[d], matmul_peak("bfloat16" if "bfloat16" in d else "float32"))
        for dtype in dtypes:
            keras.config.set_dtype_policy(dtype)
            keras.utils.set_random_seed(0)
            results = seconds_per_step(
                {"hub": keras_hub_model(L, H, A, I, args.jit_compile),
                 "kbert": kbert_model(L, H, A, I, args.jit_compile)}, steps)
            keras.backend.clear_session()
            keras.config.set_dtype_policy("float32")
            hub, mine = BATCH / results["hub"], BATCH / results["kbert"]
            throughput[config, dtype] = hub, mine
            print(f"{config:<8}{dtype:<16}{hub:>16.2f}{mine:>13.2f}{mine / hub:>7.2f}"
                  f"{flops / results['hub'] / peaks[dtype]:>9.1%}"
                  f"{flops / results['kbert'] / peaks[dtype]:>11.1%}", flush=True)
    for d, peak in peaks.items():
        print(f"matmul peak {d} (best measured): {peak / 1e9:.1f} GFLOP/s")
    for config in args.configs.split(","):
        if (config, "float32") in throughput and (config, "mixed_bfloat16") in throughput:
            (hub32, kbert32), (_, kbert16) = throughput[config, "float32"], throughput[config, "mixed_bfloat16"]
            print(f"{config}: kbert mixed_bfloat16 / keras-hub float32 {kbert16 / hub32:.2f}, "
                  f"kbert mixed_bfloat16 / kbert float32 {kbert16 / kbert32:.2f}")
    write(args, throughput, peaks, load)


def write(args, throughput: dict, peaks: dict, load: float) -> None:
    """The result file: kbert / keras-hub per size and dtype (aim: >= 1.05x in float32)."""
    ratios = {f"{config} {dtype}": round(mine / hub, 2)
              for (config, dtype), (hub, mine) in throughput.items()}
    float32 = {config: ratio for key, ratio in ratios.items()
               for config, dtype in [key.split(" ")] if dtype == "float32"}
    shown = float32 or ratios
    result_file.write_result(
        args, name="pretraining_throughput", title="Pre-training step vs keras-hub",
        area="pre-training", load_average_at_start=load,
        headline=("float32 kbert / keras-hub pre-training steps: " if float32 else
                  "kbert / keras-hub pre-training steps: ")
                 + ", ".join(f"{name} {ratio:.2f}x" for name, ratio in shown.items()) + ".",
        reference="keras-hub BertBackbone + MaskedLMHead + NSP, AdamW, stepped as `fit` steps it, "
                  "same run",
        aim=">= 1.05x keras-hub in float32",
        met=all(r >= 1.05 for r in float32.values()) if float32 else None,
        figures={"kbert_over_keras_hub": ratios,
                 "seq_per_s": {f"{c} {d}": {"keras_hub": round(h, 2), "kbert": round(k, 2)}
                               for (c, d), (h, k) in throughput.items()},
                 "matmul_peak_gflops": {d: round(p / 1e9, 1) for d, p in peaks.items()}},
        method=__doc__.split("\n\n", 2)[2])


if __name__ == "__main__":
    main()
