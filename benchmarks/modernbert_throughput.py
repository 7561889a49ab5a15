"""What ModernBERT's layers cost in pre-training: its step against BERT's, same size, same run.

    PYTHONPATH=. python benchmarks/modernbert_throughput.py --sizes=mini,small --lengths=128,512

For each size and sequence length, one masked-LM pre-training step of
`ModernBertPretrainer(ModernBertEncoder)` and of `BertPretrainer(BertEncoder,
next_sentence=False)` with the same depth, width and heads, the same
vocabulary (30,522) and batch, stepped by the loop `kbert-pretrain` runs (one
traced `tf.function`, AdamW, XLA off for both). ModernBERT's GeGLU gets two
thirds of BERT's intermediate width, so both feed-forward blocks hold the
same parameters (3 x H x 2I/3 = 2 x H x I); the parameter counts are printed.
ModernBERT's attention is local (window 128) in two layers of three, so at
512 tokens it does less attention work than BERT. Steps alternate and each
model's fastest counts, as the machine may be shared.
Writes benchmarks/results/modernbert_throughput.json (benchmarks/result_file.py).
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks import result_file  # noqa: E402
from benchmarks.pretraining_throughput import seconds_per_step  # noqa: E402
from kbert.models import BertEncoder  # noqa: E402
from kbert.models import BertPretrainer  # noqa: E402
from kbert.models.modernbert.modernbert_encoder import ModernBertEncoder  # noqa: E402
from kbert.models.modernbert.modernbert_pretrainer import ModernBertPretrainer  # noqa: E402
from kbert.training import create_optimizer  # noqa: E402
from kbert.training.pretraining.step import make_train_loop  # noqa: E402

SIZES = {  # L, H, A, BERT's intermediate
    "tiny": (2, 128, 2, 512),
    "mini": (4, 256, 4, 1024),
    "small": (4, 512, 8, 2048),
    "base": (12, 768, 12, 3072),
}
VOCAB, BATCH = 30522, 8


def fixed_batch(length: int, seed: int = 0):
    """One pre-training batch (15% of positions predicted) as tensors."""
    rng = np.random.default_rng(seed)
    predictions = max(1, round(0.15 * length))
    features = {
        "token_ids": rng.integers(5, VOCAB, (BATCH, length)).astype("int32"),
        "segment_ids": np.zeros((BATCH, length), "int32"),
        "padding_mask": np.ones((BATCH, length), "int32"),
        "mask_positions": np.sort(rng.choice(length, (BATCH, predictions)), axis=1).astype("int32"),
    }
    labels = {"mlm": rng.integers(5, VOCAB, (BATCH, predictions)).astype("int32")}
    weights = {"mlm": np.ones((BATCH, predictions), "float32")}
    return tuple(tf.nest.map_structure(tf.constant, part) for part in (features, labels, weights))


def train_step(pretrainer: keras.Model, length: int):
    """`step()`: one optimizer step of `pretrainer` on a fixed batch, as kbert-pretrain runs it."""
    optimizer = create_optimizer(1e-4, num_train_steps=10000)
    optimizer.build(pretrainer.trainable_variables)
    global_step = tf.Variable(0, dtype=tf.int64)
    data = fixed_batch(length)
    train_loop, _ = make_train_loop(tf.distribute.get_strategy(), pretrainer, optimizer,
                                    global_step, 1, False, lambda: data)
    one = tf.constant(1, tf.int32)
    return lambda: train_loop(one)[0].numpy()


def models(size: str, length: int) -> dict:
    layers, hidden, heads, intermediate = SIZES[size]
    keras.utils.set_random_seed(0)
    bert = BertPretrainer(BertEncoder(
        vocabulary_size=VOCAB, num_layers=layers, num_heads=heads, hidden_dim=hidden,
        intermediate_dim=intermediate, max_sequence_length=max(512, length)),
        next_sentence=False)
    modern = ModernBertPretrainer(ModernBertEncoder(
        vocabulary_size=VOCAB, num_layers=layers, num_heads=heads, hidden_dim=hidden,
        intermediate_dim=2 * intermediate // 3, max_sequence_length=max(512, length)))
    return {"bert": bert, "modernbert": modern}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="mini,small")
    parser.add_argument("--lengths", default="128,512")
    parser.add_argument("--rounds", type=int, default=8)
    result_file.add_flags(parser, "modernbert_throughput")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    rows = []
    print(f"tensorflow {tf.__version__}, keras {keras.__version__}; batch {BATCH}, XLA off; "
          f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}")
    print(f"{'size':<7}{'length':>7}{'BERT params':>13}{'ModernBERT params':>19}"
          f"{'BERT seq/s':>12}{'ModernBERT seq/s':>18}{'ModernBERT / BERT':>19}")
    for size in args.sizes.split(","):
        for length in (int(v) for v in args.lengths.split(",")):
            built = models(size, length)
            best = seconds_per_step({name: train_step(model, length)
                                     for name, model in built.items()}, args.rounds)
            params = {name: model.encoder.count_params() for name, model in built.items()}
            bert, modern = BATCH / best["bert"], BATCH / best["modernbert"]
            print(f"{size:<7}{length:>7}{params['bert']:>13,}{params['modernbert']:>19,}"
                  f"{bert:>12.2f}{modern:>18.2f}{modern / bert:>19.2f}", flush=True)
            rows.append({"size": size, "length": length, "bert_params": params["bert"],
                         "modernbert_params": params["modernbert"], "bert_seq_per_s": round(bert, 2),
                         "modernbert_seq_per_s": round(modern, 2),
                         "modernbert_over_bert": round(modern / bert, 2)})
            keras.backend.clear_session()
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    ratios = [r["modernbert_over_bert"] for r in rows]
    result_file.write_result(
        args, name="modernbert_throughput", title="ModernBERT pre-training step vs BERT's",
        area="pre-training", load_average_at_start=load,
        headline=f"ModernBERT's masked-LM step runs at {min(ratios):.2f}-{max(ratios):.2f}x BERT's "
                 f"speed at equal parameters ({args.sizes}; lengths {args.lengths}).",
        reference="a BERT encoder of the same size and feed-forward parameters, same run",
        aim="", met=None, figures=rows, method=__doc__.split("\n\n", 2)[2])


if __name__ == "__main__":
    main()
