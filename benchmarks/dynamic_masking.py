"""Dynamic masking: input pipeline examples/s against static TFRecords, and the step fed by each.

    PYTHONPATH=. python benchmarks/dynamic_masking.py [--corpus=demo] [--length=128]

The data tool writes the same corpus twice (dupe 1, NSP, bert-base-uncased's
vocabulary): masked (`--masking=static`) and unmasked (`--masking=dynamic`).
Pipeline: `pretraining_dataset` read for `--pipeline_batches` batches of
`--batch`, static vs dynamic (token, whole-word and 3-gram masking), each
measured twice alternately, the faster run counting (the machine is shared).
Step: the loop `kbert-pretrain` runs, fed by each pipeline (BERT-`--size`),
examples/s over `--steps` steps after the first: if dynamic masking starved
the step, its examples/s would fall below the static run's.
Writes benchmarks/results/dynamic_masking.json (benchmarks/result_file.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # noqa: E402

from benchmarks import result_file  # noqa: E402
from benchmarks.packing import CORPORA  # noqa: E402
from benchmarks.packing import SIZES  # noqa: E402
from benchmarks.packing import corpus_files  # noqa: E402
from benchmarks.packing import vocab_file  # noqa: E402
from kbert.data import MaskingConfig  # noqa: E402
from kbert.data import create_pretraining_data  # noqa: E402
from kbert.data import pretraining_dataset  # noqa: E402
from kbert.models import BertEncoder  # noqa: E402
from kbert.models import BertPretrainer  # noqa: E402
from kbert.training import create_optimizer  # noqa: E402
from kbert.training.pretraining.step import make_train_loop  # noqa: E402

VARIANTS = {
    "static": ("static", None),
    "dynamic": ("dynamic", MaskingConfig()),
    "dynamic whole-word": ("dynamic", MaskingConfig(do_whole_word_mask=True)),
    "dynamic 3-gram ww": ("dynamic", MaskingConfig(do_whole_word_mask=True, max_ngram_size=3)),
}


def dataset(files: dict, variant: str, length: int, batch: int) -> tf.data.Dataset:
    masking, config = VARIANTS[variant]
    return pretraining_dataset(files[masking], batch, length, round(length * 0.15), seed=1,
                               masking=masking, masking_config=config, vocab_file=files["vocab"])


def pipeline_rate(files, variant, length, batch, batches) -> float:
    iterator = iter(dataset(files, variant, length, batch))
    next(iterator)  # start-up: threads, the shuffle buffer, tracing
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * batch / (time.perf_counter() - start)


def step_rate(files, variant, length, batch, size, steps) -> float:
    L, H, A, I = SIZES[size]
    pretrainer = BertPretrainer(BertEncoder(
        vocabulary_size=30522, num_layers=L, num_heads=A, hidden_dim=H, intermediate_dim=I,
        max_sequence_length=length))
    optimizer = create_optimizer(1e-4, num_train_steps=10000)
    optimizer.build(pretrainer.trainable_variables)
    iterator = iter(dataset(files, variant, length, batch))
    train_loop, _ = make_train_loop(
        tf.distribute.get_strategy(), pretrainer, optimizer, tf.Variable(0, dtype=tf.int64),
        1, False, lambda: next(iterator))
    train_loop(tf.constant(1))[0].numpy()  # trace
    start = time.perf_counter()
    train_loop(tf.constant(steps))[0].numpy()
    return steps * batch / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="demo", choices=sorted(CORPORA))
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--pipeline_batches", type=int, default=100)
    parser.add_argument("--size", default="tiny", choices=sorted(SIZES))
    parser.add_argument("--steps", type=int, default=30)
    result_file.add_flags(parser, "dynamic_masking")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with result_file.scratch_dir(args) as directory:
        files = {"vocab": vocab_file(args.data_dir)}
        for masking in ("static", "dynamic"):
            files[masking] = os.path.join(directory, f"{masking}.tfrecord")
            create_pretraining_data(corpus_files(args.corpus, args.data_dir), files[masking],
                                    files["vocab"],
                                    max_seq_length=args.length,
                                    max_predictions_per_seq=round(args.length * 0.15),
                                    dupe_factor=1, masking=masking)
        rates = {v: 0.0 for v in VARIANTS}
        for _ in range(2):
            for variant in VARIANTS:
                rates[variant] = max(rates[variant], pipeline_rate(
                    files, variant, args.length, args.batch, args.pipeline_batches))
        print(f"{args.corpus}, max_seq_length {args.length}, batch {args.batch}; "
              f"step: BERT-{args.size}")
        print(f"{'masking':<20}{'pipeline ex/s':>14}{'vs static':>10}{'step ex/s':>11}{'vs static':>10}")
        steps = {}
        for variant in VARIANTS:
            steps[variant] = step_rate(files, variant, args.length, args.batch, args.size,
                                       args.steps)
            print(f"{variant:<20}{rates[variant]:>14.0f}{rates[variant] / rates['static']:>9.2f}x"
                  f"{steps[variant]:>11.0f}{steps[variant] / steps['static']:>9.2f}x", flush=True)
    slowest = min(rates, key=rates.get)
    result_file.write_result(
        args, name="dynamic_masking", title="Dynamic masking: input pipeline and step",
        area="pre-training data", load_average_at_start=load,
        headline=f"Dynamic token masking: {rates['dynamic'] / rates['static']:.2f}x static masks' "
                 f"pipeline rate; the slowest ({slowest}) still {rates[slowest]:.0f} examples/s "
                 f"against the step's {steps['static']:.0f}.",
        reference="static masks read from the TFRecords, same run", aim="", met=None,
        figures={variant: {"pipeline_examples_per_s": round(rates[variant]),
                           "pipeline_vs_static": round(rates[variant] / rates["static"], 2),
                           "step_examples_per_s": round(steps[variant], 1),
                           "step_vs_static": round(steps[variant] / steps["static"], 2)}
                 for variant in VARIANTS},
        method=__doc__.split("\n\n", 2)[2])


if __name__ == "__main__":
    main()
