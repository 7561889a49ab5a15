"""Fine-tuning quality at kbert's defaults, on CPU, in minutes: real encoders, real data subsets.

Fine-tunes exactly as a user would (subset files are written in the original
formats and passed to `run_finetuning`) at the defaults of `gin/finetune.gin`
(learning rate and epochs "auto", best checkpoint kept): only the sequence
length (and SQuAD's window stride) is set per task, to fit a small CPU. The
kept epoch is chosen on `--selection_fraction` of the training subset, held
out (`run_finetuning.selection_fraction`), so the dev score reported is clean:
nothing was chosen on it (`--selection_fraction=0` selects on dev, as the BERT
paper did; the tables then mark the figure "dev (selected)"). With
`--learning_rates=auto,3e-4,1e-4,5e-5,3e-5` each task also runs at each rate
of google-research/bert's small-BERT grid, to check the `auto` table against
the grid's best. Each run appends one JSON line to `--results_file`, so a long
campaign can run task by task; `--report` prints the tables from that file, and
every run writes the latest line of each task at the default rate to
benchmarks/results/finetuning_quality.json (benchmarks/result_file.py).

    PYTHONPATH=. python benchmarks/finetuning_quality.py --encoder=minilm   # every task
    PYTHONPATH=. python benchmarks/finetuning_quality.py --encoder=tiny \\
        --init_checkpoint=runs/tiny_pretrain --tasks=sst2_4k,mrpc --learning_rates=auto,1e-4
    PYTHONPATH=. python benchmarks/finetuning_quality.py --report

Tasks: SST-2 with 4,000 and 12,000 training sentences (dev accuracy), MRPC
(dev F1), STS-B (dev Spearman), CoNLL-2003 with 1,500 and 5,000 sentences
(dev entity F1), XQuAD-en (train on 2/3 of the articles, evaluate on the
held-out 1/3: no SQuAD training set is available offline). The reference
measured in the same run is the majority-class score (GLUE) or 0 (NER, QA).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import result_file  # noqa: E402

# name -> (task, data, training subset size, run settings other than rates and epochs)
TASKS = {
    "sst2_4k": ("glue", "sst-2", 4000, dict(max_seq_length=64)),
    "sst2_12k": ("glue", "sst-2", 12000, dict(max_seq_length=64)),
    "mrpc": ("glue", "mrpc", None, dict(max_seq_length=128)),
    "stsb": ("glue", "sts-b", None, dict(max_seq_length=128)),
    "conll_1500": ("ner", "conll2003", 1500, dict(max_seq_length=128)),
    "conll_5000": ("ner", "conll2003", 5000, dict(max_seq_length=128)),
    "xquad": ("squad", "xquad", None, dict(max_seq_length=384)),
    # run_squad.py's length 384 costs ~4x the time of 192 on a CPU; windows of 192 pieces with
    # a stride of 96 still cover every XQuAD context.
    "xquad_192": ("squad", "xquad", None, dict(max_seq_length=192, doc_stride=96)),
}
# The aims (metric on a 0-100 scale).
AIMS = {"sst2_4k": 85.0, "conll_5000": 80.0, "xquad": 55.0, "xquad_192": 55.0}
GLUE_FOLDERS = {"sst-2": "SST-2", "mrpc": "MRPC", "sts-b": "STS-B"}
GLUE_LABELS = {"sst-2": "label", "mrpc": "Quality"}


def _write(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def _glue_subset(source: str, target: str, train_size: int | None, seed: int) -> int:
    # Header + a seeded random sample of train rows; dev copied whole.
    with open(os.path.join(source, "train.tsv"), encoding="utf-8-sig") as f:
        header, *rows = f.read().rstrip("\n").split("\n")
    total = len(rows)
    if train_size and train_size < len(rows):
        rows = random.Random(seed).sample(rows, train_size)
    _write(os.path.join(target, "train.tsv"), "\n".join([header] + rows) + "\n")
    with open(os.path.join(source, "dev.tsv"), encoding="utf-8-sig") as f:
        _write(os.path.join(target, "dev.tsv"), f.read())
    return total


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
    # Articles 0, 1 -> train, 2 -> held out, and so on: 2/3 train, 1/3 held out,
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
    predictions = [max(set(labels), key=labels.count)] * len(labels)
    if metric == "f1":
        return 100 * metrics.f1_score(labels, predictions)
    return 100 * metrics.accuracy(labels, predictions)


def _prepare(name: str, data: str, work: str, seed: int) -> tuple[dict, str, float | None]:
    """Writes the task's data subset; returns run_finetuning's data arguments, a
    description, and the majority-class reference (GLUE classification)."""
    task, task_name, size, _ = TASKS[name]
    subset = os.path.join(work, "data", name)
    if task == "glue":
        folder = GLUE_FOLDERS[task_name]
        total = _glue_subset(os.path.join(data, "glue", folder), subset, size, seed)
        used = min(size or total, total)
        label = GLUE_LABELS.get(task_name)
        metric = "f1" if task_name == "mrpc" else "accuracy"
        reference = (_majority_baseline(os.path.join(subset, "dev.tsv"), label, metric)
                     if label else None)
        return (dict(task_name=task_name, data_dir=subset),
                f"train {used} of {total} (seeded sample), dev all", reference)
    if task == "ner":
        _conll_subset(os.path.join(data, "ner", "conll2003"), subset, size)
        return (dict(task_name=task_name, data_dir=subset),
                f"train first {size} of 14041 sentences, dev all 3250", 0.0)
    train_file, eval_file, n_train, n_eval = _xquad_split(
        os.path.join(data, "squad", "xquad.en.json"), subset)
    return (dict(train_file=train_file, predict_file=eval_file),
            f"train {n_train} questions (32 articles), eval {n_eval} (16 held-out articles)", 0.0)


def _minilm(work: str) -> str:
    path = os.path.join(work, "minilm")
    if not os.path.exists(os.path.join(path, "encoder.weights.h5")):
        subprocess.run([sys.executable, "-m", "kbert.bin.convert", "--source=minilm",
                        f"--output_dir={path}", "--overwrite"],
                       check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    return path


def run_one(name: str, encoder: str, init: str, rate: str, args) -> dict:
    """Fine-tunes one task at one rate ("auto" = the default); returns the result line."""
    from kbert.tasks.squad.task import SquadConfig
    from kbert.training.finetuning import run_finetuning

    task, _, _, settings = TASKS[name]
    run_settings = dict(settings)
    if "doc_stride" in run_settings:
        run_settings["task_options"] = SquadConfig(doc_stride=run_settings.pop("doc_stride"))
    data_arguments, sizes, reference = _prepare(name, os.path.abspath(args.data_dir),
                                                args.work_dir, args.seed)
    learning_rate = {} if rate == "auto" else {"learning_rate": float(rate)}
    model_dir = os.path.join(args.work_dir, "runs", f"{encoder}-{name}-{rate}")
    print(f"\n=== {encoder} {name} lr={rate}: {sizes}; {settings}", flush=True)
    start = time.time()
    results = run_finetuning(task=task, init_checkpoint=init, model_dir=model_dir, do_train=True,
                             do_eval=True, verbose=2, selection_fraction=args.selection_fraction,
                             **run_settings, **learning_rate, **data_arguments)
    metric = results["main_metric"]
    scale = 1 if task == "squad" else 100  # SQuAD's scorer reports 0-100 already
    curve = [round(point[metric] * scale, 2) for point in results["eval_curve"]]
    line = dict(encoder=encoder, task=name, rate=rate, learning_rate=results["learning_rate"],
                metric=metric, value=round(results[metric] * scale, 2),
                best_step=results["best_step"], train_steps=results["train_steps"], curve=curve,
                minutes=round((time.time() - start) / 60, 1), sizes=sizes, settings=settings,
                reference=None if reference is None else round(reference, 2),
                selection=results["selection"], machine_load=os.getloadavg())
    print(json.dumps(line), flush=True)
    with open(args.results_file, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
    return line


def report(results_file: str) -> dict:
    """Prints the defaults table and the auto-vs-grid table; returns the latest line of each run."""
    lines = [json.loads(line) for line in open(results_file, encoding="utf-8") if line.strip()]
    latest = {}
    for line in lines:  # a later run of the same (encoder, task, rate) replaces an earlier one
        latest[(line["encoder"], line["task"], line["rate"])] = line
    print("| encoder | task | metric | at defaults (lr auto) | kept epoch chosen on | aim | reference "
          "| best step / steps | selection curve | minutes | data |")
    print("|---|---|---|---:|---|---:|---:|---|---|---:|---|")
    for (encoder, name, rate), r in latest.items():
        if rate != "auto":
            continue
        aim = AIMS.get(name)
        chosen = r.get("selection", {"split": "dev"})
        chosen = ("dev (selected)" if chosen["split"] == "dev" else
                  f"{chosen['fraction']:.0%} of train held out ({chosen['num_examples']}): clean")
        print(f"| {encoder} | {name} | {r['metric']} | **{r['value']:.1f}** | {chosen} | "
              f"{'-' if aim is None else f'{aim:.0f}'} | "
              f"{'-' if r['reference'] is None else r['reference']} | "
              f"{r['best_step']} / {r['train_steps']} | {', '.join(map(str, r['curve']))} | "
              f"{r['minutes']} | {r['sizes']} |")
    print("\n| encoder | task | auto rate | at auto | " + " | ".join(
        f"lr {g}" for g in ("3e-4", "1e-4", "5e-5", "3e-5")) + " | best of grid | auto / best |")
    print("|---|---|---:|---:|" + "---:|" * 6)
    for encoder, name in dict.fromkeys((e, n) for e, n, _ in latest):
        auto = latest.get((encoder, name, "auto"))
        grid = {g: latest.get((encoder, name, g)) for g in ("3e-4", "1e-4", "5e-5", "3e-5")}
        if auto is None or not any(grid.values()):
            continue
        # The auto run is the grid run at its rate.
        for g in grid:
            if grid[g] is None and float(g) == auto["learning_rate"]:
                grid[g] = auto
        done = {g: r["value"] for g, r in grid.items() if r is not None}
        best = max(done, key=done.get)
        cells = " | ".join("-" if g not in done else
                           (f"**{done[g]:.1f}**" if g == best else f"{done[g]:.1f}") for g in grid)
        print(f"| {encoder} | {name} | {auto['learning_rate']:g} | {auto['value']:.1f} | {cells} | "
              f"{best} | {auto['value'] / done[best]:.3f} |")
    return latest


def write(args, latest: dict, load: float) -> None:
    """The result file: `--encoder`'s latest run of each task at the default (auto) rate."""
    runs = {name: r for (encoder, name, rate), r in latest.items()
            if encoder == args.encoder and rate == "auto"}
    if not runs:
        return
    aimed = {name: r["value"] >= AIMS[name] for name, r in runs.items() if name in AIMS}
    selected = [name for name, r in runs.items() if r.get("selection", {"split": "dev"})["split"] == "dev"]
    result_file.write_result(
        args, name="finetuning_quality", title="Fine-tuning quality at the defaults",
        area="fine-tuning", load_average_at_start=load,
        headline=f"{args.encoder} at kbert's defaults: "
                 + ", ".join(f"{name} {r['value']:.2f} {r['metric']}" for name, r in runs.items())
                 + ".",
        reference="majority class (GLUE classification), 0 (NER, QA)",
        aim=", ".join(f"{name} >= {aim:g}" for name, aim in AIMS.items() if name in runs),
        met=all(aimed.values()) if aimed else None,
        selection=(f"selected on dev: {', '.join(selected)}" if selected else
                   f"clean: kept epoch chosen on {args.selection_fraction:.0%} of the training "
                   "subset held out, dev scored once"),
        figures=list(runs.values()), method=__doc__.split("\n\n    PYTHONPATH")[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--encoder", default="minilm",
                        help="Name in the tables; 'minilm' converts all-MiniLM-L6-v2 with "
                        "kbert-convert --source=minilm unless --init_checkpoint is given.")
    parser.add_argument("--init_checkpoint", default=None, help="kbert pre-trained directory.")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--learning_rates", default="auto",
                        help="Comma-separated: auto (the default) and/or explicit rates.")
    parser.add_argument("--seed", type=int, default=1, help="Seed of the data subsets.")
    parser.add_argument("--selection_fraction", type=float, default=0.1,
                        help="Share of the training subset held out to choose the kept epoch "
                        "(0: choose on dev, whose score is then selected, not clean).")
    parser.add_argument("--results_file", default=None,
                        help="JSON lines, appended; default <work_dir>/results.jsonl.")
    parser.add_argument("--report", action="store_true",
                        help="Only print the tables (and write the result file).")
    result_file.add_flags(parser, "finetuning_quality")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    # Kept between invocations (default kbert_finetuning_quality in the temporary directory):
    # a campaign runs task by task into one results file.
    args.work_dir = args.work_dir or os.path.join(tempfile.gettempdir(), "kbert_finetuning_quality")
    args.results_file = args.results_file or os.path.join(args.work_dir, "results.jsonl")
    if args.report:
        write(args, report(args.results_file), load)
        return
    logging.basicConfig(format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("kbert").setLevel(logging.INFO)
    os.makedirs(args.work_dir, exist_ok=True)
    init = args.init_checkpoint or _minilm(args.work_dir)
    for name in args.tasks.split(","):
        if name not in TASKS:
            raise SystemExit(f"--tasks: unknown task {name!r}; expected some of {list(TASKS)}.")
        for rate in args.learning_rates.split(","):
            run_one(name, args.encoder, init, rate, args)
    write(args, report(args.results_file), load)


if __name__ == "__main__":
    main()
