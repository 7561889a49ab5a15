"""Continued pre-training of all-MiniLM-L6-v2: DAPT (with and without new words) and TAPT.

Everything runs as a user would run it, one subprocess per step (kbert-convert,
kbert-vocab extend, tools/task_text.py, tools/create_pretraining_data.py,
kbert-pretrain --gin_file=gin/continue_pretraining.gin) and `run_finetuning`.
The hyperparameters below were fixed before any score was seen.

DAPT. Domain: the NLTK Gutenberg books of `--data_dir/corpus/gutenberg` (19th-century
fiction, verse and drama; all-MiniLM-L6-v2 was trained on web and question-answer
text; the two Latin-1 books, `chesterton-ball.txt` and `shakespeare-caesar.txt`, are
read as Latin-1). Each book's last tenth of lines is held out. Arms, each evaluated
on the held-out tenth (`--eval_input_file`):
  start       the converted model as a continued run starts it (0 steps; its masked-LM
              head is fresh: the released model has none),
  dapt        DAPT_STEPS steps of gin/continue_pretraining.gin,
  dapt+vocab  the same after `kbert-vocab extend --max_new_tokens=NEW_TOKENS` on the
              training books (data remade with the extended vocab.txt).
The vocabulary changes what is predicted, so `dapt+vocab`'s loss per masked token is
not directly comparable with the others': tokens per word (train and held out) say how
much shorter the text got.

TAPT. SST-2 (4,000 training sentences, dev accuracy) and CoNLL-2003 (first 1,500
training sentences, dev entity F1): the task's training inputs without labels
(tools/task_text.py) pre-trained on for TAPT_STEPS steps, then fine-tuned with the
same settings as the converted model (kbert's "auto" rate and epochs, the final model
kept: no checkpoint is chosen on dev, so dev is a split not used for model selection),
3 seeds each; mean, standard deviation and the gain against two standard errors of
the difference.

    PYTHONPATH=. nice -n 10 python benchmarks/continued_pretraining.py          # full (hours)
    PYTHONPATH=. python benchmarks/continued_pretraining.py --quick             # minutes, a smoke test
    PYTHONPATH=. python benchmarks/continued_pretraining.py --report

`--quick` runs every step on tiny slices (its figures mean nothing; it shows the
pipeline works). Results are appended as JSON lines to `<work_dir>/results.jsonl`
(default work_dir: `kbert_continued_pretraining` in the temporary directory, kept so that
the parts can run as separate invocations); every run, `--report` included, writes the
latest line of each arm to benchmarks/results/continued_pretraining.json
(benchmarks/result_file.py), unless --quick.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import result_file  # noqa: E402

# Fixed before looking at any score. DAPT_STEPS was 1,000 until the first full run:
# cut to 300 before it started, so that the whole benchmark fits a 3-hour session
# on a 2-core machine (measured there: 2.4 s a step at batch 32 x 128).
FULL = dict(max_seq_length=128, train_batch_size=32, dapt_steps=300, tapt_steps=400,
            new_tokens=500, min_count=5, seeds=(1, 2, 3), sst2_train=4000, conll_train=1500,
            heldout_fraction=0.1, corpus_bytes=None, eval_steps=None)
QUICK = dict(max_seq_length=64, train_batch_size=8, dapt_steps=6, tapt_steps=4, new_tokens=40,
             min_count=2, seeds=(1,), sst2_train=64, conll_train=48, heldout_fraction=0.1,
             corpus_bytes=60_000, eval_steps=4)


def _read_book(path: str) -> str:
    """A book's text: UTF-8, or Latin-1 for the NLTK files that are (two of them)."""
    raw = open(path, "rb").read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "2"}


def _run(command: list[str], what: str) -> tuple[str, float]:
    """Runs a step as a subprocess; returns its stdout and the CPU seconds it used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    result = subprocess.run(command, cwd=REPO, env=_env(), capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode:
        raise SystemExit(f"{what} failed:\n{result.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"  {what}: {time.time() - start:.0f} s wall, {cpu:.0f} s CPU", flush=True)
    return result.stdout, cpu


def _split_corpus(data_dir: str, work: str, settings: dict) -> tuple[str, str]:
    """Each Gutenberg book's last tenth of lines held out; the rest for training."""
    source = os.path.join(data_dir, "corpus", "gutenberg")
    books = sorted(f for f in os.listdir(source) if f.endswith(".txt"))
    train, heldout = [], []
    for book in books:
        lines = _read_book(os.path.join(source, book)).splitlines()
        if settings["corpus_bytes"]:
            lines = lines[:settings["corpus_bytes"] // 60]
        cut = int(len(lines) * (1 - settings["heldout_fraction"]))
        train.append("\n".join(lines[:cut]).strip())
        heldout.append("\n".join(lines[cut:]).strip())
        if settings["corpus_bytes"] and len(train) == 2:
            break
    paths = os.path.join(work, "gutenberg-train.txt"), os.path.join(work, "gutenberg-heldout.txt")
    for path, documents in zip(paths, (train, heldout)):
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n\n".join(documents) + "\n")  # a blank line between books
    return paths


def _data(text: str, output: str, vocab_file: str, settings: dict, seed: int = 12345) -> str:
    if not os.path.exists(output):
        _run([sys.executable, "tools/create_pretraining_data.py", f"--input_file={text}",
              f"--output_file={output}", f"--vocab_file={vocab_file}", "--do_lower_case",
              "--masking=dynamic", "--next_sentence=none", "--dupe_factor=1",
              f"--max_seq_length={settings['max_seq_length']}", "--max_predictions_per_seq=20",
              f"--random_seed={seed}", "--num_workers=1"], f"data {os.path.basename(output)}")
    return output


def _pretrain(init: str, train: str, heldout: str | None, model_dir: str, steps: int,
              settings: dict) -> dict:
    """kbert-pretrain with the continuation recipe; returns the summary with the CPU time."""
    warmup = max(1, round(0.06 * steps)) if steps else 0
    params = [f"run_pretraining.num_train_steps = {steps}",
              f"run_pretraining.num_warmup_steps = {warmup}",
              f"run_pretraining.train_batch_size = {settings['train_batch_size']}",
              f"run_pretraining.max_seq_length = {settings['max_seq_length']}",
              f"run_pretraining.save_checkpoints_steps = {max(steps, 1)}",
              f"run_pretraining.log_every_steps = {max(1, steps // 10)}"]
    if settings["eval_steps"]:
        params.append(f"run_pretraining.max_eval_steps = {settings['eval_steps']}")
    command = [sys.executable, "-m", "kbert.bin.pretrain", "--gin_file=gin/continue_pretraining.gin",
               f"--init_checkpoint={init}", f"--input_file={train}", f"--model_dir={model_dir}"]
    command += [f"--gin_params={p}" for p in params]
    if heldout:
        command.append(f"--eval_input_file={heldout}")
    summary_file = os.path.join(model_dir, "summary.json")
    if not os.path.exists(summary_file):
        _, cpu = _run(command, f"kbert-pretrain {os.path.basename(model_dir)} ({steps} steps)")
        with open(os.path.join(model_dir, "cpu_seconds.txt"), "w") as f:
            f.write(f"{cpu}\n")
    summary = json.load(open(summary_file))
    summary["cpu_seconds"] = float(open(os.path.join(model_dir, "cpu_seconds.txt")).read())
    return summary


def _tokens_per_word(text: str, directory: str) -> float:
    from kbert.checkpoints import open_model_dir
    from kbert.data.vocab import count_words

    return count_words(text, open_model_dir(directory).tokenizer).tokens_per_word


def dapt(args, settings: dict, minilm: str) -> list[dict]:
    work = os.path.join(args.work_dir, "dapt")
    os.makedirs(work, exist_ok=True)
    train_text, heldout_text = _split_corpus(args.data_dir, work, settings)
    extended = os.path.join(work, "minilm-gutenberg-vocab")
    if not os.path.exists(extended):
        _run([sys.executable, "-m", "kbert.bin.vocab", "extend", f"--model_dir={minilm}",
              f"--corpus={train_text}", f"--max_new_tokens={settings['new_tokens']}",
              f"--min_count={settings['min_count']}", f"--output_dir={extended}"],
             "kbert-vocab extend")
    record = json.load(open(os.path.join(extended, "vocabulary_extension.json")))
    lines = []
    for arm, init, steps in (("start", minilm, 0), ("dapt", minilm, settings["dapt_steps"]),
                             ("dapt+vocab", extended, settings["dapt_steps"])):
        vocab = os.path.join(init, "vocab.txt")
        tag = "extended" if init == extended else "original"
        train = _data(train_text, os.path.join(work, f"train-{tag}.tfrecord"), vocab, settings)
        heldout = _data(heldout_text, os.path.join(work, f"heldout-{tag}.tfrecord"), vocab,
                        settings, seed=54321)
        summary = _pretrain(init, train, heldout, os.path.join(work, arm), steps, settings)
        results = summary["eval_results"]
        line = dict(part="dapt", arm=arm, steps=steps, cpu_seconds=round(summary["cpu_seconds"]),
                    heldout_masked_lm_loss=round(results["masked_lm_loss"], 4),
                    heldout_masked_lm_accuracy=round(results["masked_lm_accuracy"], 4),
                    unigram_masked_lm_loss=round(results["unigram_masked_lm_loss"], 4),
                    tokens_per_word_heldout=round(_tokens_per_word(heldout_text, init), 4),
                    vocabulary=record["vocabulary_size_after"] if init == extended
                    else record["vocabulary_size_before"], quick=args.quick)
        if init == extended:
            line.update(new_tokens=len(record["added"]),
                        tokens_per_word_train=[round(record["tokens_per_word_before"], 4),
                                               round(record["tokens_per_word_after"], 4)])
        _emit(args, line)
        lines.append(line)
    return lines


def _finetune(task: str, task_name: str, data: dict, init: str, model_dir: str, seed: int,
              max_seq_length: int) -> float:
    from kbert.training.finetuning import run_finetuning

    results = run_finetuning(task=task, init_checkpoint=init, model_dir=model_dir,
                             task_name=task_name, seed=seed, max_seq_length=max_seq_length,
                             keep_best_checkpoint=False, verbose=0, **data)
    return 100 * results[results["main_metric"]]


def tapt(args, settings: dict, minilm: str) -> list[dict]:
    import finetuning_quality as fq

    lines = []
    for name, task, task_name, size, length in (
            ("sst2", "glue", "sst-2", settings["sst2_train"], 64),
            ("conll", "ner", "conll2003", settings["conll_train"], 128)):
        if name not in args.tasks.split(","):
            continue
        work = os.path.join(args.work_dir, "tapt", name)
        subset = os.path.join(work, "data")
        if task == "glue":
            fq._glue_subset(os.path.join(args.data_dir, "glue", "SST-2"), subset, size, 1)
        else:
            fq._conll_subset(os.path.join(args.data_dir, "ner", "conll2003"), subset, size)
        if args.quick:  # a short dev split too
            _shorten_dev(subset, task)
        text = os.path.join(work, "task_text.txt")
        if not os.path.exists(text):
            _run([sys.executable, "tools/task_text.py", f"--task={task}",
                  f"--task_name={task_name}", f"--data_dir={subset}", f"--output_file={text}"],
                 f"task_text {name}")
        length = min(length, settings["max_seq_length"]) if args.quick else length
        run_settings = {**settings, "max_seq_length": length}
        train = _data(text, os.path.join(work, "tapt.tfrecord"),
                      os.path.join(minilm, "vocab.txt"), run_settings)
        summary = _pretrain(minilm, train, None, os.path.join(work, "tapt"),
                            settings["tapt_steps"], run_settings)
        scores = {"converted": [], "tapt": []}
        for arm, init in (("converted", minilm), ("tapt", os.path.join(work, "tapt"))):
            for seed in settings["seeds"]:
                start = time.time()
                scores[arm].append(_finetune(task, task_name, dict(data_dir=subset), init,
                                             os.path.join(work, f"ft-{arm}-{seed}"), seed, length))
                print(f"  fine-tune {name} {arm} seed {seed}: {scores[arm][-1]:.2f} "
                      f"({time.time() - start:.0f} s)", flush=True)
        line = dict(part="tapt", task=name, tapt_steps=settings["tapt_steps"],
                    tapt_cpu_seconds=round(summary["cpu_seconds"]), seeds=list(settings["seeds"]),
                    converted=[round(s, 2) for s in scores["converted"]],
                    tapt=[round(s, 2) for s in scores["tapt"]], quick=args.quick)
        line.update(_compare(scores["converted"], scores["tapt"]))
        _emit(args, line)
        lines.append(line)
    return lines


def _shorten_dev(subset: str, task: str) -> None:
    if task == "glue":
        path = os.path.join(subset, "dev.tsv")
        rows = open(path, encoding="utf-8").read().rstrip("\n").split("\n")
        open(path, "w", encoding="utf-8").write("\n".join(rows[:65]) + "\n")
    else:
        path = os.path.join(subset, "valid.txt")
        blocks = open(path, encoding="utf-8").read().split("\n\n")
        open(path, "w", encoding="utf-8").write("\n\n".join(blocks[:40]) + "\n\n")


def _compare(a: list[float], b: list[float]) -> dict:
    """Means, standard deviations, the gain and two standard errors of the difference."""
    sd = (lambda x: statistics.stdev(x) if len(x) > 1 else float("nan"))
    two_se = 2 * math.sqrt(sd(a) ** 2 / len(a) + sd(b) ** 2 / len(b))
    gain = statistics.mean(b) - statistics.mean(a)
    return dict(converted_mean=round(statistics.mean(a), 2), converted_sd=round(sd(a), 2),
                tapt_mean=round(statistics.mean(b), 2), tapt_sd=round(sd(b), 2),
                gain=round(gain, 2), two_standard_errors=round(two_se, 2),
                significant=bool(gain > two_se))


def _emit(args, line: dict) -> None:
    line = {**line, "machine_load": [round(x, 1) for x in os.getloadavg()]}
    print(json.dumps(line), flush=True)
    with open(args.results_file, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def report(results_file: str) -> dict:
    """Prints the DAPT and TAPT tables (latest line of each arm) and returns those lines."""
    latest = {}
    for line in open(results_file, encoding="utf-8"):
        if line.strip():
            r = json.loads(line)
            latest[(r["part"], r.get("arm") or r.get("task"), r["quick"])] = r
    print("| DAPT arm | steps | CPU s | vocabulary | held-out MLM loss | accuracy | unigram loss "
          "| tokens/word held out | quick |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for (part, _, _), r in latest.items():
        if part == "dapt":
            print(f"| {r['arm']} | {r['steps']} | {r['cpu_seconds']} | {r['vocabulary']} | "
                  f"{r['heldout_masked_lm_loss']:.4f} | {r['heldout_masked_lm_accuracy']:.4f} | "
                  f"{r['unigram_masked_lm_loss']:.4f} | {r['tokens_per_word_heldout']:.4f} | "
                  f"{r['quick']} |")
    print("\n| TAPT task | TAPT steps | converted (mean ± sd) | after TAPT | gain | 2 SE | seeds "
          "| quick |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    for (part, _, _), r in latest.items():
        if part == "tapt":
            print(f"| {r['task']} | {r['tapt_steps']} | {r['converted_mean']:.2f} ± "
                  f"{r['converted_sd']:.2f} | {r['tapt_mean']:.2f} ± {r['tapt_sd']:.2f} | "
                  f"{r['gain']:+.2f} | {r['two_standard_errors']:.2f} | {r['seeds']} | "
                  f"{r['quick']} |")
    return latest


def write(args, latest: dict, load: float) -> None:
    """The result file from the latest full (not --quick) line of each arm."""
    dapt_rows = [r for (part, _, quick), r in latest.items() if part == "dapt" and not quick]
    tapt_rows = [r for (part, _, quick), r in latest.items() if part == "tapt" and not quick]
    if not dapt_rows and not tapt_rows:
        return
    words = [f"{r['task']} {r['gain']:+.2f} (2 SE {r['two_standard_errors']:.2f})" for r in tapt_rows]
    dapt_loss = {r["arm"]: r["heldout_masked_lm_loss"] for r in dapt_rows}
    headline = ("TAPT then fine-tuning all-MiniLM-L6-v2: " + ", ".join(words) + "."
                if words else "") + (f" DAPT held-out MLM loss {dapt_loss['dapt']:.2f}."
                                     if "dapt" in dapt_loss else "")
    result_file.write_result(
        args, name="continued_pretraining", title="Continued pre-training (DAPT, TAPT)",
        area="pre-training", load_average_at_start=load, headline=headline.strip(),
        reference="the converted all-MiniLM-L6-v2 fine-tuned with the same settings, 3 seeds; "
                  "the unigram loss of the training text",
        aim="a downstream gain beyond 2 standard errors",
        met=all(r["significant"] for r in tapt_rows) if tapt_rows else None,
        selection="clean: settings fixed before any score, last weights kept, dev scored once",
        figures={"dapt": dapt_rows, "tapt": tapt_rows}, method=__doc__.split("\n\n    PYTHONPATH")[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default="dapt,tapt")
    parser.add_argument("--tasks", default="sst2,conll", help="TAPT's tasks (sst2, conll).")
    parser.add_argument("--quick", action="store_true", help="Tiny slices: a smoke test.")
    parser.add_argument("--report", action="store_true",
                        help="Only print the tables (and write the result file).")
    result_file.add_flags(parser, "continued_pretraining")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    args.data_dir = os.path.abspath(args.data_dir)
    args.work_dir = args.work_dir or os.path.join(
        tempfile.gettempdir(), "kbert_continued_pretraining" + ("_quick" if args.quick else ""))
    args.results_file = os.path.join(args.work_dir, "results.jsonl")
    if args.report:
        write(args, report(args.results_file), load)
        return
    os.makedirs(args.work_dir, exist_ok=True)
    settings = QUICK if args.quick else FULL
    print(f"settings: {json.dumps(settings)}", flush=True)
    minilm = os.path.join(args.work_dir, "minilm")
    if not os.path.exists(os.path.join(minilm, "encoder.weights.h5")):
        _run([sys.executable, "-m", "kbert.bin.convert", "--source=minilm",
              f"--output_dir={minilm}", "--overwrite"], "kbert-convert --source=minilm")
    parts = args.parts.split(",")
    if "dapt" in parts:
        dapt(args, settings, minilm)
    if "tapt" in parts:
        tapt(args, settings, minilm)
    write(args, report(args.results_file), load)


if __name__ == "__main__":
    main()
