"""Sequence packing: padding before and after, and real tokens per second of the pre-training step.

    PYTHONPATH=. python benchmarks/packing.py [--corpora=demo,wikitext2] [--lengths=128,512]

For each corpus and `max_seq_length` the data tool writes static TFRecords
(dupe 1, NSP, bert-base-uncased's vocabulary); the fraction of padding tokens
is counted over every instance, padded one per row and packed
(`PackingConfig`, first-fit decreasing over windows of 1024 instances). Then
one padded batch and one packed batch of the same shape (`--batch` rows) are
stepped by the loop `kbert-pretrain` runs, alternating, fastest of `--rounds`
each (the machine is shared); non-padding tokens per second = the batch's
real tokens / step time, and the ratio packed / padded is the speed-up.
Writes benchmarks/results/packing.json (benchmarks/result_file.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks import result_file  # noqa: E402
from kbert.data import PackingConfig  # noqa: E402
from kbert.data import create_pretraining_data  # noqa: E402
from kbert.data import pretraining_dataset  # noqa: E402
from kbert.models import BertEncoder  # noqa: E402
from kbert.models import BertPretrainer  # noqa: E402
from kbert.training import create_optimizer  # noqa: E402
from kbert.training.pretraining.step import make_train_loop  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPORA = ("demo", "wikitext2")
SIZES = {"tiny": (2, 128, 2, 512), "mini": (4, 256, 4, 1024)}  # L, H, A, I
PACKING = PackingConfig(max_instances_per_row=4, window_size=1024)


def corpus_files(name: str, data_dir: str) -> str:
    """The glob of corpus `name`: the demo's books, or WikiText-2 under `data_dir`."""
    return {"demo": os.path.join(REPO, "demo", "data", "gutenberg", "*.txt"),
            "wikitext2": os.path.join(data_dir, "corpus", "wikitext-2", "*.txt")}[name]


def vocab_file(data_dir: str) -> str:
    """bert-base-uncased's vocab.txt under `data_dir`."""
    return os.path.join(data_dir, "vocab", "bert-base-uncased-vocab.txt")


def make_data(corpus: str, length: int, directory: str, vocab: str) -> str:
    path = os.path.join(directory, f"{os.path.basename(os.path.dirname(corpus))}-{length}.tfrecord")
    create_pretraining_data(corpus, path, vocab, max_seq_length=length,
                            max_predictions_per_seq=round(length * 0.15), dupe_factor=1)
    return path


def padding(path: str, length: int, packing: PackingConfig | None) -> tuple[float, int, int]:
    """`(padding fraction, instances or rows, real tokens)` over the whole file."""
    dataset = pretraining_dataset(path, 256, length, round(length * 0.15), is_training=False,
                                  packing=packing)
    rows = tokens = 0
    for features, _, _ in dataset:
        rows += int(features["padding_mask"].shape[0])
        tokens += int(tf.reduce_sum(features["padding_mask"]))
    return 1 - tokens / (rows * length), rows, tokens


def one_batch(path: str, length: int, batch: int, packing: PackingConfig | None):
    dataset = pretraining_dataset(path, batch, length, round(length * 0.15), seed=1,
                                  packing=packing)
    return next(iter(dataset))


def step_function(size: str, length: int, data):
    L, H, A, I = SIZES[size]
    pretrainer = BertPretrainer(BertEncoder(
        vocabulary_size=30522, num_layers=L, num_heads=A, hidden_dim=H, intermediate_dim=I,
        max_sequence_length=length))
    optimizer = create_optimizer(1e-4, num_train_steps=10000)
    optimizer.build(pretrainer.trainable_variables)
    train_loop, _ = make_train_loop(
        tf.distribute.get_strategy(), pretrainer, optimizer, tf.Variable(0, dtype=tf.int64),
        1, False, lambda: data)
    one = tf.constant(1, tf.int32)
    return lambda: train_loop(one)[0].numpy()


def fastest(steps: dict, rounds: int) -> dict:
    for step in steps.values():
        step()  # trace
        step()
    best = {name: float("inf") for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", default="demo,wikitext2")
    parser.add_argument("--lengths", default="128,512")
    parser.add_argument("--size", default="tiny", choices=sorted(SIZES))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=10)
    result_file.add_flags(parser, "packing")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    rows_out = []
    print(f"model {args.size}, batch {args.batch} rows, {PACKING}")
    print(f"{'corpus':<10}{'len':>5}{'instances':>10}{'pad before':>11}{'rows packed':>12}"
          f"{'pad after':>10}{'tok/s padded':>13}{'tok/s packed':>13}{'speed-up':>9}")
    with result_file.scratch_dir(args) as directory:
        for corpus in args.corpora.split(","):
            for length in (int(x) for x in args.lengths.split(",")):
                path = make_data(corpus_files(corpus, args.data_dir), length, directory,
                                 vocab_file(args.data_dir))
                before, instances, tokens = padding(path, length, None)
                after, rows, packed_tokens = padding(path, length, PACKING)
                assert packed_tokens == tokens, (packed_tokens, tokens)
                batches = {name: one_batch(path, length, args.batch, packing)
                           for name, packing in (("padded", None), ("packed", PACKING))}
                seconds = fastest({name: step_function(args.size, length, data)
                                   for name, data in batches.items()}, args.rounds)
                rate = {name: float(tf.reduce_sum(batches[name][0]["padding_mask"])) / seconds[name]
                        for name in batches}
                print(f"{corpus:<10}{length:>5}{instances:>10}{before:>11.1%}{rows:>12}"
                      f"{after:>10.1%}{rate['padded']:>13.0f}{rate['packed']:>13.0f}"
                      f"{rate['packed'] / rate['padded']:>8.2f}x", flush=True)
                rows_out.append({"corpus": corpus, "max_seq_length": length,
                                 "instances": instances, "padding_before": round(before, 4),
                                 "packed_rows": rows, "padding_after": round(after, 4),
                                 "tokens_per_s_padded": round(rate["padded"]),
                                 "tokens_per_s_packed": round(rate["packed"]),
                                 "speed_up": round(rate["packed"] / rate["padded"], 2)})
    judged = [r for r in rows_out if r["padding_before"] > 0.5]
    best = min(judged or rows_out, key=lambda r: r["speed_up"])  # the aim's weakest case
    result_file.write_result(
        args, name="packing", title="Sequence packing for pre-training", area="pre-training data",
        load_average_at_start=load,
        headline=f"Packing {best['corpus']} at length {best['max_seq_length']}: "
                 f"{best['speed_up']:.2f}x real tokens per second (padding "
                 f"{best['padding_before']:.1%} -> {best['padding_after']:.1%}).",
        reference="the same batches padded, alternating in the same run",
        aim=">= 1.5x where padding is over half the tokens",
        met=(all(r["speed_up"] >= 1.5 for r in judged) if judged else None),
        figures=rows_out, method=__doc__.split("\n\n", 2)[2])


if __name__ == "__main__":
    main()
