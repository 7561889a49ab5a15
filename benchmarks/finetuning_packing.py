"""Fine-tuning with packing vs length bucketing: padding, and examples per second of the step.

    PYTHONPATH=. python benchmarks/finetuning_packing.py [--data=demo/data/sst2/train.tsv]

SST-2 sentences (GLUE TSV) through `classification_dataset` with
bert-base-uncased's vocabulary at `max_seq_length` 128: the fraction of padding
tokens if every row were padded to 128, with length bucketing (each batch padded
to its longest) and packed (`PackingConfig`, first-fit decreasing). Then a
`BertClassifier` (BERT-`--size`, random weights: speed does not depend on them)
trains with `train_on_batch` on `--batches` bucketed batches and as many packed
ones, alternating, fastest step of each batch kept (the machine is shared);
examples per second = examples in the batches / summed step times, and the
ratio packed / bucketed is the speed-up of an epoch.
Writes benchmarks/results/finetuning_packing.json (benchmarks/result_file.py).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks import result_file  # noqa: E402
from benchmarks.packing import SIZES  # noqa: E402
from benchmarks.packing import vocab_file  # noqa: E402
from kbert.data import PackingConfig  # noqa: E402
from kbert.data import TextPreprocessor  # noqa: E402
from kbert.data import classification_dataset  # noqa: E402
from kbert.models import BertClassifier  # noqa: E402
from kbert.models import BertEncoder  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKING = PackingConfig(max_instances_per_row=16, window_size=1024)


def batches(preprocessor, texts, labels, batch, packing):
    dataset = classification_dataset(preprocessor, texts, None, labels, batch, packing=packing)
    return list(dataset)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(REPO, "demo", "data", "sst2", "train.tsv"))
    parser.add_argument("--size", default="tiny", choices=sorted(SIZES))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--length", type=int, default=128)
    result_file.add_flags(parser, "finetuning_packing")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with open(args.data, encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    texts, labels = [r[0] for r in rows], [int(r[1]) for r in rows]
    preprocessor = TextPreprocessor.from_vocab_file(vocab_file(args.data_dir), True, args.length)
    bucketed = batches(preprocessor, texts, labels, args.batch, None)
    packed = batches(preprocessor, texts, labels, args.batch, PACKING)
    tokens = sum(int(tf.reduce_sum(b["padding_mask"])) for b in bucketed)
    cells = {name: sum(int(tf.size(b["token_ids"])) for b in data)
             for name, data in (("bucketed", bucketed), ("packed", packed))}
    print(f"{os.path.basename(os.path.dirname(args.data))}: {len(texts)} examples, "
          f"{tokens} tokens, max_seq_length {args.length}")
    print(f"padding: padded to {args.length} {1 - tokens / (len(texts) * args.length):.1%}, "
          f"bucketed {1 - tokens / cells['bucketed']:.1%}, packed {1 - tokens / cells['packed']:.1%}"
          f" ({len(bucketed)} bucketed batches vs {len(packed)} packed, batch {args.batch})")
    L, H, A, I = SIZES[args.size]
    model = BertClassifier(BertEncoder(vocabulary_size=30522, num_layers=L, num_heads=A,
                                       hidden_dim=H, intermediate_dim=I,
                                       max_sequence_length=args.length), num_classes=2)
    model.compile(jit_compile=False)
    names = ("token_ids", "segment_ids", "padding_mask")
    steps = {
        "bucketed": [lambda b=b: model.train_on_batch({k: b[k] for k in names}, b["label"])
                     for b in bucketed[:args.batches]],
        "packed": [lambda b=b: model.train_on_batch(
            {k: b[k] for k in (*names, "instance_ids", "position_ids", "cls_positions")},
            b["label"], sample_weight=b["label_weight"]) for b in packed[:args.batches]],
    }
    examples = {"bucketed": sum(int(tf.shape(b["token_ids"])[0]) for b in bucketed[:args.batches]),
                "packed": sum(int(tf.reduce_sum(b["label_weight"])) for b in packed[:args.batches])}
    seconds = {name: 0.0 for name in steps}
    for name in steps:  # Trace every shape once.
        for step in steps[name]:
            step()
    for name in steps:
        for step in steps[name]:
            best = float("inf")
            for _ in range(3):
                start = time.perf_counter()
                step()
                best = min(best, time.perf_counter() - start)
            seconds[name] += best
    rate = {name: examples[name] / seconds[name] for name in steps}
    print(f"BERT-{args.size} train step: bucketed {rate['bucketed']:.0f} examples/s, packed "
          f"{rate['packed']:.0f} examples/s: {rate['packed'] / rate['bucketed']:.2f}x")
    epoch = {name: len(data) for name, data in (("bucketed", bucketed), ("packed", packed))}
    print(f"an epoch: {epoch['bucketed']} bucketed steps vs {epoch['packed']} packed steps")
    ratio = rate["packed"] / rate["bucketed"]
    result_file.write_result(
        args, name="finetuning_packing", title="Fine-tuning: packing vs length bucketing",
        area="fine-tuning", load_average_at_start=load,
        headline=f"Packed fine-tuning: {ratio:.2f}x length bucketing's examples/s; an epoch in "
                 f"{epoch['packed']} steps instead of {epoch['bucketed']}.",
        reference="length bucketing (kbert's default), same run", aim="", met=None,
        figures={"examples_per_s": {k: round(v, 1) for k, v in rate.items()},
                 "ratio": round(ratio, 2), "steps_per_epoch": epoch,
                 "padding": {"padded_to_length": round(1 - tokens / (len(texts) * args.length), 4),
                             **{k: round(1 - tokens / v, 4) for k, v in cells.items()}}},
        method=__doc__.split("\n\n", 2)[2])


if __name__ == "__main__":
    main()
