"""Fine-tuning on your own files (issue 48): the converted all-MiniLM-L6-v2 at kbert's defaults.

Each part writes its data in a user's file form, fine-tunes with
`run_finetuning` as `kbert-finetune` does (learning rate, epochs and batch
size "auto", best checkpoint kept), chooses the kept epoch on a share of the
training file held out with the seed (`selection_fraction`), and scores a
split nothing was chosen on, once. Results go into `--results_file` under the
part's name (other parts' entries are kept), with the baseline measured in
the same run beside them.

Parts:
  token_classification  CoNLL-2003's chunk tags (the third column of
      `../shared/data/ner/conll2003`: NP, VP, PP, ADVP, ADJP, SBAR, PRT, ... in
      IOB2), a tag set kbert has no reader for. `--train_sentences` training
      sentences spread over the file (every n-th) are a `tokens`/`ner_tags`
      JSON lines file (Hugging Face's run_ner.py form); the dev sentences, with
      their chunk tags, a CoNLL column file (`word chunk`), the reported split
      (less the 2 holding `I-PRT`, which no training sentence has: kbert
      refuses a dev tag the model cannot predict). Entity-level
      (chunk) F1, as conlleval scores CoNLL-2000 chunking. Baseline: each
      word's most frequent training tag (the CoNLL-2000 shared task's
      baseline).

    PYTHONPATH=. python benchmarks/own_data.py --parts=token_classification
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def _conll_columns(path: str, column: int) -> list[tuple[list[str], list[str]]]:
    """The sentences of a CoNLL-2003 file: their words and one column of tags."""
    sentences, words, tags = [], [], []
    with open(path, encoding="utf-8") as f:
        for line in f.read().split("\n") + [""]:
            columns = line.split()
            if columns and columns[0] != "-DOCSTART-":
                words.append(columns[0])
                tags.append(columns[column])
            elif not columns and words:
                sentences.append((words, tags))
                words, tags = [], []
    return sentences


def _minilm(work_dir: str) -> str:
    path = os.path.join(work_dir, "minilm")
    if not os.path.exists(os.path.join(path, "encoder.weights.h5")):
        subprocess.run([sys.executable, "-m", "kbert.bin.convert", "--source=minilm",
                        f"--output_dir={path}", f"--cache_dir={work_dir}/cache", "--overwrite"],
                       check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    return path


def token_classification(args, init_checkpoint: str) -> dict:
    """Part (c): CoNLL-2003's chunk tags from a tokens/ner_tags training file, dev as CoNLL columns."""
    from kbert.training.finetuning import run_finetuning

    source = os.path.join(args.data_dir, "ner", "conll2003")
    every = 14041 // args.train_sentences
    train = _conll_columns(os.path.join(source, "train.txt"), 2)[::every][:args.train_sentences]
    # kbert-finetune refuses a dev tag the training file lacks (a model cannot predict it):
    # I-PRT is in 2 dev sentences and in no training sentence. Those sentences are left out.
    known = {tag for _, tags in train for tag in tags}
    all_dev = _conll_columns(os.path.join(source, "valid.txt"), 2)
    dev = [(words, tags) for words, tags in all_dev if set(tags) <= known]
    unknown = sorted({tag for _, tags in all_dev for tag in tags} - known)
    work = os.path.join(args.work_dir, "chunks")
    os.makedirs(work, exist_ok=True)
    train_file = os.path.join(work, "train.jsonl")
    with open(train_file, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"tokens": words, "ner_tags": tags}) + "\n"
                     for words, tags in train)
    dev_file = os.path.join(work, "dev.conll")
    with open(dev_file, "w", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(f"{w} {t}" for w, t in zip(words, tags))
                            for words, tags in dev) + "\n")
    start = time.time()
    results = run_finetuning("token_classification", init_checkpoint,
                             os.path.join(work, "model"), train_file=train_file,
                             validation_file=dev_file, seed=args.seed,
                             selection_fraction=args.selection_fraction, verbose=2)
    minutes = (time.time() - start) / 60
    baseline = results["baseline"]
    per_type = {kind: {key: round(value, 4) if isinstance(value, float) else value
                       for key, value in row.items()}
                for kind, row in sorted(results["per_type"].items(),
                                        key=lambda item: -item[1]["support"])}
    return {
        "data": (f"CoNLL-2003 chunk tags (third column, IOB2): train on every {every}th of "
                 f"the 14,041 training sentences ({len(train)}) as tokens/ner_tags JSON lines; "
                 f"report on {len(dev)} of the {len(all_dev)} dev sentences as a CoNLL column "
                 f"file (left out: the {len(all_dev) - len(dev)} holding {unknown}, tags no "
                 "training sentence has, which kbert-finetune refuses)"),
        "tags": len({tag for _, tags in train for tag in tags}),
        "selection": results["selection"],
        "reported_split": "dev (valid.txt), scored once on the kept model",
        "metrics": {key: round(results[key], 4) for key in ("f1", "precision", "recall",
                                                              "accuracy")},
        "baseline": {"predicts": baseline["predicts"],
                     **{key: round(baseline[key], 4) for key in ("f1", "precision", "recall",
                                                                 "accuracy")}},
        "per_type": per_type,
        "settings": {key: results[key] for key in ("learning_rate", "train_batch_size",
                                                   "num_train_epochs", "train_steps",
                                                   "best_step")},
        "minutes": round(minutes, 1),
    }


PARTS = {"token_classification": token_classification}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--data_dir", default=os.path.join(REPO, "..", "shared", "data"))
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(), "kbert_own_data"))
    parser.add_argument("--results_file",
                        default=os.path.join(REPO, "benchmarks", "results", "own_data.json"))
    parser.add_argument("--train_sentences", type=int, default=2000,
                        help="Token classification: training sentences (a subsample, for CPU).")
    parser.add_argument("--selection_fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=12345)
    args = parser.parse_args()

    os.makedirs(args.work_dir, exist_ok=True)
    init_checkpoint = _minilm(args.work_dir)
    found = {}
    if os.path.exists(args.results_file):
        with open(args.results_file, encoding="utf-8") as f:
            found = json.load(f)
    for part in args.parts.split(","):
        record = PARTS[part](args, init_checkpoint)
        record.update(model="all-MiniLM-L6-v2 (kbert-convert --source=minilm), defaults",
                      machine=f"{platform.machine()}, {os.cpu_count()} CPUs",
                      date=time.strftime("%Y-%m-%d"))
        print(json.dumps({part: record}, indent=2), flush=True)
        found[part] = record
    os.makedirs(os.path.dirname(args.results_file), exist_ok=True)
    temporary = args.results_file + ".tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(json.dumps(found, indent=2, sort_keys=True) + "\n")
    os.replace(temporary, args.results_file)


if __name__ == "__main__":
    main()
