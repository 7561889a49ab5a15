"""Fine-tuning on your own files (issue 48): real labelled files built from ../shared/data,
kbert-finetune --task=classification at its defaults, clean figures, and kbert-predict's speed.

Each part builds a user's files from data kbert has no classification reader for,
fine-tunes the converted all-MiniLM-L6-v2 (`kbert-convert --source=minilm`) with
`kbert-finetune` exactly as a user would (learning rate, batch size, epochs and
warm-up "auto", best step kept), chooses the kept step (and the multi-label
threshold) on a seeded 10% of the training file held out
(`run_finetuning.selection_fraction`), and reports the figures once, on the
`--validation_file`, which nothing was chosen on, beside the constant baseline
of the same run. It then times `kbert-predict` on a file of unseen rows against
`model.predict` of the same Keras model on the same rows (tokenized in tf.data
either way), in the same run.

Parts (one function each; `PARTS` lists them):
- `multiclass`: author attribution. Project Gutenberg books of NLTK's corpus
  (`corpus/gutenberg/*.txt`, read by kbert only as pre-training text) cut into
  passages of `--passage_words` words; the label is the author (7 classes:
  Austen, Blake, Chesterton, Melville, Milton, Shakespeare, Whitman). Each
  book is split in order: its first 80% of passages can train, the next 10%
  validate, the last 10% are predicted, so no passage is next to one it was
  scored on. A CSV file (`text`, `author`).
- `multilabel`: the entity types a sentence mentions (PER, ORG, LOC, MISC: a
  list, possibly empty), from CoNLL-2003's files (`ner/conll2003/*.txt`, which
  kbert reads only for token tagging): train from `train.txt`, validation from
  `valid.txt`, predicted rows from `test.txt`. A JSON lines file (`text`,
  `entity_types`).
- `token_classification`: each word's chunk tag (CoNLL-2003's third column,
  layout `word POS chunk NER` per ner/README.md: NP, VP, PP, ADVP,
  ... in IOB2; kbert reads only the fourth, the entity tags), from the same
  files: training sentences as `tokens`/`ner_tags` JSON lines (Hugging Face's
  run_ner.py form), validation sentences as CoNLL columns (`word chunk`; less
  those holding a tag the training sample lacks, which kbert-finetune
  refuses), rows to predict as JSON lines of `id` and `tokens` (the column the
  model was trained on). Entity-level (chunk) F1, as conlleval scores
  CoNLL-2000 chunking, beside each word's most frequent training tag. Run as
  measured: `--parts=token_classification --train_rows=400 --validation_rows=200
  --predict_rows=200` (7.5 minutes on a 2-core CPU at load 4).

The rows are a seeded sample of each pool (`--train_rows`, `--validation_rows`,
`--predict_rows`) so that a run fits a small CPU; the result file says how many.

    PYTHONPATH=. python benchmarks/own_data.py                    # every part
    PYTHONPATH=. python benchmarks/own_data.py --parts=multilabel --train_rows=3000

Writes `benchmarks/results/own_data.json` (`--result_file`, through
benchmarks/result_file.py): per part the data, the reported figures and
baselines, how they were selected, the run's settings and minutes, and the
prediction speeds; the machine, CPU, date, commit and the exact command. A run
of some `--parts` merges into an existing file: the parts it ran are replaced,
each with a `run` (its date, commit, command, load average, minutes); the
others are kept as they were, with their own `run`.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import result_file  # noqa: E402

AUTHORS = ("austen", "blake", "chesterton", "melville", "milton", "shakespeare", "whitman")
ENTITY_TYPES = ("LOC", "MISC", "ORG", "PER")


# ---- the users' files ----------------------------------------------------------------------

def _write_csv(path: str, rows: list[dict]) -> str:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _write_jsonl(path: str, rows: list[dict]) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return path


def _sample(rows: list, count: int, rng: random.Random) -> list:
    return rows if count >= len(rows) else rng.sample(rows, count)


def _book_passages(path: str, words_per_passage: int) -> list[str]:
    raw = open(path, "rb").read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:  # shakespeare-caesar.txt is Latin-1 (the corpus README)
        text = raw.decode("latin-1")
    words = text.split("\n", 1)[1].split()  # line 1 is the bracketed title
    return [" ".join(words[i:i + words_per_passage])
            for i in range(0, len(words) - words_per_passage + 1, words_per_passage)]


def gutenberg_files(data_dir: str, scratch: str, args) -> dict:
    """Author attribution: train/validation/predict CSV files of passages and their author."""
    rng = random.Random(args.seed)
    pools = {"train": [], "validation": [], "predict": []}
    for path in sorted(glob.glob(os.path.join(data_dir, "corpus", "gutenberg", "*.txt"))):
        author = os.path.basename(path).split("-")[0]
        passages = _book_passages(path, args.passage_words)
        cut1, cut2 = int(0.8 * len(passages)), int(0.9 * len(passages))
        for split, part in (("train", passages[:cut1]), ("validation", passages[cut1:cut2]),
                            ("predict", passages[cut2:])):
            pools[split] += [{"text": text, "author": author} for text in part]
    sizes = {"train": args.train_rows, "validation": args.validation_rows,
             "predict": args.predict_rows}
    files, counts = {}, {}
    for split, pool in pools.items():
        rows = _sample(pool, sizes[split], rng)
        rows = [{"id": f"{split}-{i}", **row} for i, row in enumerate(rows)]
        files[split] = _write_csv(os.path.join(scratch, f"authors_{split}.csv"), rows)
        counts[split] = {"rows": len(rows), "of": len(pool)}
    return {"files": files, "label_column": "author", "counts": counts,
            "source": "corpus/gutenberg/*.txt (13 books, 7 authors), passages of "
                      f"{args.passage_words} words; per book the first 80% of passages train, "
                      "the next 10% validate, the last 10% are predicted"}


def _conll_sentences(path: str) -> list[dict]:
    sentences, words, types = [], [], set()
    for line in open(path, encoding="utf-8").read().split("\n") + [""]:
        if not line.strip():
            if words and words[0] != "-DOCSTART-":
                sentences.append({"text": " ".join(words), "entity_types": sorted(types)})
            words, types = [], set()
            continue
        fields = line.split()
        words.append(fields[0])
        if fields[-1] != "O":
            types.add(fields[-1][2:])
    return sentences


def conll_files(data_dir: str, scratch: str, args) -> dict:
    """Entity types per sentence: train/validation/predict JSON lines files."""
    rng = random.Random(args.seed)
    folder = os.path.join(data_dir, "ner", "conll2003")
    sources = {"train": "train.txt", "validation": "valid.txt", "predict": "test.txt"}
    sizes = {"train": args.train_rows, "validation": args.validation_rows,
             "predict": args.predict_rows}
    files, counts = {}, {}
    for split, name in sources.items():
        pool = _conll_sentences(os.path.join(folder, name))
        rows = [{"id": f"{split}-{i}", **row}
                for i, row in enumerate(_sample(pool, sizes[split], rng))]
        files[split] = _write_jsonl(os.path.join(scratch, f"entity_types_{split}.jsonl"), rows)
        counts[split] = {"rows": len(rows), "of": len(pool)}
    return {"files": files, "label_column": "entity_types", "counts": counts,
            "source": "ner/conll2003/{train,valid,test}.txt: each sentence's entity types "
                      "(PER, ORG, LOC, MISC; a list, empty for none)"}


def conll_chunk_files(data_dir: str, scratch: str, args) -> dict:
    """Chunk tags per word: tokens/ner_tags JSON lines to train, CoNLL columns to validate, word
    lists to predict."""
    rng = random.Random(args.seed)
    folder = os.path.join(data_dir, "ner", "conll2003")
    pools = {}
    for split, name in (("train", "train.txt"), ("validation", "valid.txt"),
                        ("predict", "test.txt")):
        pools[split], words, tags = [], [], []
        for line in open(os.path.join(folder, name), encoding="utf-8").read().split("\n") + [""]:
            fields = line.split()
            if fields and fields[0] != "-DOCSTART-":
                words.append(fields[0])
                tags.append(fields[2])  # the chunk tag (IOB2), not the entity tag
            elif not fields and words:
                pools[split].append((words, tags))
                words, tags = [], []
    train = _sample(pools["train"], args.train_rows, rng)
    # kbert-finetune refuses a validation tag the training file lacks (no model can predict it).
    known = {tag for _, tags in train for tag in tags}
    validation = _sample([s for s in pools["validation"] if set(s[1]) <= known],
                         args.validation_rows, rng)
    predict = _sample(pools["predict"], args.predict_rows, rng)
    files = {"train": _write_jsonl(os.path.join(scratch, "chunks_train.jsonl"),
                                   [{"tokens": w, "ner_tags": t} for w, t in train]),
             "validation": os.path.join(scratch, "chunks_validation.conll"),
             # The column the model is trained on (`tokens`), which kbert-predict reads.
             "predict": _write_jsonl(os.path.join(scratch, "chunks_predict.jsonl"),
                                     [{"id": f"predict-{i}", "tokens": w}
                                      for i, (w, _) in enumerate(predict)])}
    with open(files["validation"], "w", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(f"{w} {t}" for w, t in zip(*s)) for s in validation) + "\n")
    counts = {split: {"rows": len(rows), "of": len(pools[split])}
              for split, rows in (("train", train), ("validation", validation),
                                  ("predict", predict))}
    return {"task": "token_classification", "files": files, "label_column": None,
            "counts": counts,
            "source": "ner/conll2003/{train,valid,test}.txt: each word's chunk tag (the third "
                      "column: NP, VP, PP, ADVP, ... in IOB2), a tag set kbert has no reader for; "
                      "validation sentences holding a tag the training sample lacks are left out"}


# ---- one part: fine-tune, report, time predictions ------------------------------------------

def _minilm(scratch: str) -> str:
    path = os.path.join(scratch, "minilm")
    if not os.path.exists(os.path.join(path, "encoder.weights.h5")):
        subprocess.run([sys.executable, "-m", "kbert.bin.convert", "--source=minilm",
                        f"--output_dir={path}", "--overwrite"], check=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": REPO}, timeout=900)
    return path


def _finetune(name: str, data: dict, init: str, scratch: str, args) -> tuple[dict, str, list]:
    model_dir = os.path.join(scratch, f"run_{name}")
    shutil.rmtree(model_dir, ignore_errors=True)
    command = [sys.executable, "-m", "kbert.bin.finetune",
               f"--task={data.get('task', 'classification')}",
               f"--train_file={data['files']['train']}",
               f"--validation_file={data['files']['validation']}", f"--init_checkpoint={init}",
               f"--model_dir={model_dir}", "--do_train", "--do_eval",
               f"--gin_params=run_finetuning.selection_fraction = {args.selection_fraction}"]
    if data["label_column"]:
        command.append(f"--label_column_name={data['label_column']}")
    if args.num_train_epochs != "auto":
        command.append(f"--gin_params=run_finetuning.num_train_epochs = {args.num_train_epochs}")
    print(f"\n=== {name}: {' '.join(command[1:])}", flush=True)
    run = subprocess.run(command, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO},
                         capture_output=True, text=True, timeout=6 * 3600)
    print(run.stdout, flush=True)
    if run.returncode:
        raise SystemExit(f"kbert-finetune failed:\n{run.stderr[-3000:]}")
    with open(os.path.join(model_dir, "eval_results.json"), encoding="utf-8") as f:
        return json.load(f), model_dir, command


def _predict_speed(model_dir: str, predict_file: str, scratch: str, batch_size: int) -> dict:
    """kbert-predict on the file, then model.predict on the same rows, in the same run."""
    output = os.path.join(scratch, os.path.basename(predict_file) + ".predictions.jsonl")
    command = [sys.executable, "-m", "kbert.bin.predict", f"--model_dir={model_dir}",
               f"--input_file={predict_file}", f"--output_file={output}",
               f"--batch_size={batch_size}"]
    run = subprocess.run(command, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO},
                         capture_output=True, text=True, timeout=3600)
    if run.returncode:
        raise SystemExit(f"kbert-predict failed:\n{run.stderr[-3000:]}")
    found = re.search(r"kbert-predict: (\d+) rows in ([\d.]+) s \(([\d.]+) rows/s\)", run.stdout)
    rows, seconds = int(found.group(1)), float(found.group(2))
    reference = _model_predict_speed(model_dir, predict_file, batch_size)
    return {"rows": rows, "batch_size": batch_size,
            "kbert_predict": {"seconds": seconds, "rows_per_second": round(rows / seconds, 1),
                              "what": "reading the file, tokenizing, the model, writing JSON "
                                      "lines (model already loaded)"},
            "model_predict": reference,
            "ratio": round((rows / seconds) / reference["rows_per_second"], 3)}


def _model_predict_speed(model_dir: str, predict_file: str, batch_size: int) -> dict:
    from kbert.checkpoints import open_model_dir
    from kbert.data.table_files import read_table
    from kbert.tasks import get_task
    from kbert.tasks.base import encoder_inputs

    directory = open_model_dir(model_dir)
    record = directory.task_config
    task = get_task(record.task).from_description(record.to_dict())
    column = task.input_columns()  # the trained text column(s), as kbert-predict reads them
    rows = read_table(predict_file).rows
    values = [[row.values[name] for row in rows] for name in column]
    examples = task.examples_from_values(values[0] if len(values) == 1 else tuple(values))
    preprocessor = directory.preprocessor(record.max_seq_length)
    model = directory.model()
    dataset = task.dataset(examples, preprocessor, batch_size, is_training=False).map(
        encoder_inputs)
    start = time.perf_counter()
    model.predict(dataset, verbose=0)
    seconds = time.perf_counter() - start
    return {"seconds": round(seconds, 2), "rows_per_second": round(len(rows) / seconds, 1),
            "what": "keras Model.predict on the same rows, tokenized in the same tf.data "
                    "pipeline (outputs not decoded, nothing read or written)"}


def _part(name: str, build, figures: tuple[str, ...], args, init: str, scratch: str) -> dict:
    data = build(os.path.abspath(args.data_dir), scratch, args)
    start = time.time()
    results, model_dir, command = _finetune(name, data, init, scratch, args)
    minutes = round((time.time() - start) / 60, 1)
    baseline = results.get("baseline", {})
    recorded = json.load(open(os.path.join(model_dir, "task_config.json"), encoding="utf-8"))
    part = {
        "data": {key: data[key] for key in ("source", "counts", "label_column")},
        "problem_type": recorded.get("problem_type"), "label_names": recorded["label_names"],
        "reported_on": f"--validation_file ({data['counts']['validation']['rows']} rows): scored "
                       "once, on the kept model; nothing was chosen on it",
        "selected_on": results["selection"],
        "figures": {key: round(results[key], 4) for key in figures if key in results},
        "baseline": {key: (round(value, 4) if isinstance(value, float) else value)
                     for key, value in baseline.items()},
        "per_class": results.get("per_class", results.get("per_type")),
        "settings": {key: results.get(key) for key in ("learning_rate", "train_batch_size",
                                                       "num_train_epochs", "train_steps",
                                                       "warmup_steps", "best_step")},
        "truncated": results.get("truncated"),
        "warnings": results.get("warnings", []),
        "finetune_minutes": minutes,
        # The scratch folder's path is one machine's: the command names it <work_dir>.
        "finetune_command": " ".join(command[1:]).replace(scratch, "<work_dir>"),
    }
    if "threshold" in results:
        part["threshold"] = results["threshold"]
    part["prediction_speed"] = _predict_speed(model_dir, data["files"]["predict"], scratch,
                                              args.predict_batch_size)
    return part


def multiclass(args, init: str, scratch: str) -> dict:
    """(a) Author attribution of Gutenberg passages: single-label, 7 classes, from CSV."""
    return _part("multiclass", gutenberg_files, ("accuracy", "macro_f1"), args, init, scratch)


def multilabel(args, init: str, scratch: str) -> dict:
    """(b) The entity types of CoNLL-2003 sentences: multi-label, 4 classes, from JSON lines."""
    return _part("multilabel", conll_files, ("micro_f1", "macro_f1", "subset_accuracy"), args,
                 init, scratch)


def token_classification(args, init: str, scratch: str) -> dict:
    """(c) CoNLL-2003's chunk tags per word: a tag set of its own, from JSON lines and CoNLL."""
    return _part("token_classification", conll_chunk_files,
                 ("f1", "precision", "recall", "accuracy"), args, init, scratch)


# Part name -> function(args, init_checkpoint, scratch_dir) -> its result dict.
PARTS = {"multiclass": multiclass, "multilabel": multilabel,
         "token_classification": token_classification}


def headline(parts: dict, encoder: str) -> str:
    """Each part's first figure beside its constant baseline, in 25 words or fewer."""
    words = []
    for name, part in parts.items():
        metric, value = next(iter(part["figures"].items()))
        words.append(f"{name} {metric} {value:.2f} (baseline {part['baseline'].get(metric, 0):.2f})")
    return f"Your own files, {encoder} at kbert-finetune's defaults: " + ", ".join(words) + "."


def _merged(parts: dict, run: dict, path: str | None) -> dict:
    """This run's parts, each with its `run`, over the parts of the result file at `path` that
    this run did not run (kept as they were)."""
    parts = {name: {**part, "run": run} for name, part in parts.items()}
    if not path or not os.path.exists(path):
        return parts
    with open(path, encoding="utf-8") as f:
        earlier = json.load(f).get("parts", {})
    return {**earlier, **parts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--init_checkpoint", default=None,
                        help="A kbert pre-trained directory; default all-MiniLM-L6-v2 converted.")
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--train_rows", type=int, default=500)
    parser.add_argument("--validation_rows", type=int, default=300)
    parser.add_argument("--predict_rows", type=int, default=300)
    parser.add_argument("--passage_words", type=int, default=32)
    parser.add_argument("--num_train_epochs", default="auto",
                        help="kbert-finetune's default 'auto', or a number to fit a slow machine.")
    parser.add_argument("--selection_fraction", type=float, default=0.1)
    parser.add_argument("--predict_batch_size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    result_file.add_flags(parser, "own_data")
    args = parser.parse_args()
    unknown = set(args.parts.split(",")) - set(PARTS)
    if unknown:
        raise SystemExit(f"--parts: unknown {sorted(unknown)}; expected some of {list(PARTS)}.")
    load = os.getloadavg()[0]
    scratch = result_file.work_dir(args, prefix="kbert_own_data_")
    started = time.time()
    selection = (f"clean: the kept step (and a multi-label threshold) chosen on "
                 f"{args.selection_fraction:.0%} of each training file held out (seeded); figures "
                 "reported once on the validation file")
    parts = {}
    try:
        init = args.init_checkpoint or _minilm(scratch)
        for name in args.parts.split(","):
            parts[name] = PARTS[name](args, init, scratch)
            print(json.dumps({name: parts[name]}, indent=1), flush=True)
    finally:
        if not args.work_dir:
            shutil.rmtree(scratch, ignore_errors=True)
    run = {"date": result_file.now(), "commit": result_file.commit(),
           "command": result_file.command(), "minutes": round((time.time() - started) / 60, 1),
           "load_average_at_start": round(load, 2)}
    parts = _merged(parts, run, args.result_file)
    result_file.write_result(
        args, name="own_data", title="Fine-tuning on your own files", area="fine-tuning",
        load_average_at_start=load,
        headline=headline(parts, "your encoder" if args.init_checkpoint else "all-MiniLM-L6-v2"),
        reference="the constant baseline of each part (the majority class; the most frequent "
                  "label set; each word's most frequent tag), same run",
        aim="", met=None, selection=selection,
        figures={name: {"figures": part["figures"], "baseline": part["baseline"]}
                 for name, part in parts.items()},
        parts=parts, issue=48, minutes=run["minutes"],
        encoder=args.init_checkpoint or "all-MiniLM-L6-v2 (kbert-convert --source=minilm)",
        method=__doc__.split("\n\n    PYTHONPATH")[0])

if __name__ == "__main__":
    main()
