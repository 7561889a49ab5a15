"""Fine-tuning quality of kbert with the real all-MiniLM-L6-v2 weights, on CPU, in minutes.

Fine-tunes on subsets of the shared data exactly as a user would (subset files
are written in the original formats and passed to `run_finetuning`), then
reports the dev metric against the issue's target and a reference measured in
the same run (the majority-class baseline for GLUE).

    PYTHONPATH=. python benchmarks/finetuning_quality.py                 # all four
    PYTHONPATH=. python benchmarks/finetuning_quality.py --tasks=mrpc,sst2

Tasks and targets: SST-2 dev accuracy >= 85%, MRPC dev F1 >= 80, CoNLL-2003
dev entity F1 >= 80, XQuAD-en F1 >= 50 (train on 2/3 of the articles,
evaluate on the held-out 1/3; no SQuAD training set is available offline).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def _write(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def _glue_subset(source: str, target: str, train_size: int | None, seed: int) -> None:
    # Header + a seeded random sample of train rows; dev copied whole.
    with open(os.path.join(source, "train.tsv"), encoding="utf-8-sig") as f:
        header, *rows = f.read().rstrip("\n").split("\n")
    if train_size and train_size < len(rows):
        rows = random.Random(seed).sample(rows, train_size)
    _write(os.path.join(target, "train.tsv"), "\n".join([header] + rows) + "\n")
    with open(os.path.join(source, "dev.tsv"), encoding="utf-8-sig") as f:
        _write(os.path.join(target, "dev.tsv"), f.read())


def _conll_subset(source: str, target: str, train_sentences: int | None) -> None:
    with open(os.path.join(source, "train.txt"), encoding="utf-8") as f:
        blocks = f.read().split("\n\n")
    if train_sentences:
        blocks = [b for b in blocks if b.strip() and not b.startswith("-DOCSTART-")]
        blocks = blocks[:train_sentences]
    _write(os.path.join(target, "train.txt"), "\n\n".join(blocks) + "\n\n")
    with open(os.path.join(source, "valid.txt"), encoding="utf-8") as f:
        _write(os.path.join(target, "valid.txt"), f.read())


def _xquad_split(path: str, target: str) -> tuple[str, str, int, int]:
    # Articles 0, 1 -> train, 2 -> eval, and so on: 2/3 train, 1/3 held out,
    # spread over the file rather than cut at one point.
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    train = [a for i, a in enumerate(data["data"]) if i % 3 != 2]
    held_out = [a for i, a in enumerate(data["data"]) if i % 3 == 2]

    def count(articles):
        return sum(len(p["qas"]) for a in articles for p in a["paragraphs"])

    train_file = _write(os.path.join(target, "train.json"),
                        json.dumps({"version": "1.1", "data": train}))
    eval_file = _write(os.path.join(target, "eval.json"),
                       json.dumps({"version": "1.1", "data": held_out}))
    return train_file, eval_file, count(train), count(held_out)


def _majority_baseline(dev_tsv: str, label_column: str, metric: str) -> float:
    from kbert.tasks import metrics

    with open(dev_tsv, encoding="utf-8-sig") as f:
        header, *rows = f.read().rstrip("\n").split("\n")
    column = header.split("\t").index(label_column)
    labels = [int(r.split("\t")[column]) for r in rows]
    majority = max(set(labels), key=labels.count)
    predictions = [majority] * len(labels)
    if metric == "f1":
        return 100 * metrics.f1_score(labels, predictions)
    return 100 * metrics.accuracy(labels, predictions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", default=os.path.join(REPO, "..", "shared", "data"))
    parser.add_argument("--init_checkpoint", default=None,
                        help="kbert pre-trained directory; default: convert all-MiniLM-L6-v2 "
                        "with kbert-convert --source=minilm into --work_dir.")
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "kbert_finetuning_quality"))
    parser.add_argument("--tasks", default="sst2,mrpc,conll,xquad")
    # Sized for a 2-core CPU shared with other jobs: a few minutes per task.
    parser.add_argument("--sst2_train", type=int, default=12000)
    parser.add_argument("--mrpc_train", type=int, default=3668)
    parser.add_argument("--conll_train", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    from kbert.tasks import SquadConfig
    from kbert.training.finetuning import run_finetuning

    data = os.path.abspath(args.data_dir)
    work = args.work_dir
    os.makedirs(work, exist_ok=True)
    init = args.init_checkpoint
    if init is None:
        init = os.path.join(work, "minilm")
        if not os.path.exists(os.path.join(init, "encoder.weights.h5")):
            subprocess.run([sys.executable, "-m", "kbert.bin.convert", "--source=minilm",
                            f"--output_dir={init}", f"--cache_dir={work}/cache", "--overwrite"],
                           check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})

    runs = {
        "sst2": dict(task="glue", task_name="sst-2", train_batch_size=32, learning_rate=1e-4,
                     num_train_epochs=1.0, max_seq_length=64),
        "mrpc": dict(task="glue", task_name="mrpc", train_batch_size=32, learning_rate=1e-4,
                     num_train_epochs=3.0, max_seq_length=96),
        "conll": dict(task="ner", task_name="conll2003", train_batch_size=32,
                      learning_rate=1e-4, num_train_epochs=2.0, max_seq_length=96),
        "xquad": dict(task="squad", train_batch_size=16, learning_rate=1e-4,
                      num_train_epochs=8.0, max_seq_length=192,
                      task_options=SquadConfig(doc_stride=96)),
    }
    targets = {"sst2": ("accuracy", 85.0), "mrpc": ("f1", 80.0), "conll": ("f1", 80.0),
               "xquad": ("f1", 50.0)}
    rows = []
    for name in args.tasks.split(","):
        settings = dict(runs[name])
        subset = os.path.join(work, "data", name)
        extra, sizes, reference = {}, "", None
        if name == "sst2":
            _glue_subset(os.path.join(data, "glue", "SST-2"), subset, args.sst2_train, args.seed)
            extra["data_dir"] = subset
            sizes = f"train {args.sst2_train} of 67349 (random), dev all 872"
            reference = ("majority accuracy",
                         _majority_baseline(os.path.join(subset, "dev.tsv"), "label", "acc"))
        elif name == "mrpc":
            _glue_subset(os.path.join(data, "glue", "MRPC"), subset, args.mrpc_train, args.seed)
            extra["data_dir"] = subset
            sizes = f"train {args.mrpc_train or 3668} of 3668 (random), dev all 408"
            reference = ("all-paraphrase F1",
                         _majority_baseline(os.path.join(subset, "dev.tsv"), "Quality", "f1"))
        elif name == "conll":
            _conll_subset(os.path.join(data, "ner", "conll2003"), subset, args.conll_train)
            extra["data_dir"] = subset
            sizes = f"train first {args.conll_train} of 14041 sentences, dev all 3250"
        elif name == "xquad":
            train_file, eval_file, n_train, n_eval = _xquad_split(
                os.path.join(data, "squad", "xquad.en.json"), subset)
            extra.update(train_file=train_file, predict_file=eval_file)
            sizes = f"train {n_train} questions (32 articles), eval {n_eval} (16 held-out articles)"
        model_dir = os.path.join(work, "runs", name)
        print(f"\n=== {name}: {sizes}; {settings}", flush=True)
        start = time.time()
        results = run_finetuning(init_checkpoint=init, model_dir=model_dir, do_train=True,
                                 do_eval=True, seed=args.seed, verbose=2, **settings, **extra)
        minutes = (time.time() - start) / 60
        metric, target = targets[name]
        value = results[metric] * (100 if name != "xquad" else 1)
        line = dict(task=name, metric=metric, value=round(value, 2), target=target,
                    met=value >= target, minutes=round(minutes, 1), sizes=sizes,
                    settings=settings, results=results)
        if reference:
            line["reference"] = {reference[0]: round(reference[1], 2)}
        print(json.dumps(line), flush=True)
        rows.append(line)
    print("\n| task | metric | kbert + MiniLM-L6 | target | reference (same run) | minutes | data |")
    print("|---|---|---:|---:|---|---:|---|")
    for r in rows:
        reference = ", ".join(f"{k} {v}" for k, v in r.get("reference", {}).items()) or "-"
        print(f"| {r['task']} | {r['metric']} | {r['value']:.1f} | {r['target']:.0f} | "
              f"{reference} | {r['minutes']} | {r['sizes']} |")


if __name__ == "__main__":
    main()
