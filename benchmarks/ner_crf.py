"""CRF against softmax, and feature-based against fine-tuning, for CoNLL-2003 NER with MiniLM-L6.

Each variant fine-tunes the same converted all-MiniLM-L6-v2 on the same
CoNLL-2003 training subset with the same steps and seed (`run_finetuning`, as
`kbert-finetune --task=ner` does), then reports dev entity F1 and the number
of predicted dev sentences holding an invalid BIO sequence (`I-X` first or
after anything but `B-X`/`I-X`). The softmax head, run in the same process, is
the reference. The kept epoch of each is chosen on `--selection_fraction`
(default 10%) of the training sentences, held out with the seed, so the dev
F1 reported chose nothing (clean); `--selection_fraction=0` chooses on dev, as
the runs before 2026-11-26 did. Writes benchmarks/results/ner_crf.json
(benchmarks/result_file.py).

    PYTHONPATH=. python benchmarks/ner_crf.py                          # softmax, crf
    PYTHONPATH=. python benchmarks/ner_crf.py --variants=softmax,crf,frozen_last,frozen_concat_last_4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import result_file  # noqa: E402
from benchmarks.finetuning_quality import _conll_subset  # noqa: E402


def invalid_sequences(tag_lists) -> int:
    """Sentences with at least one `I-X` that follows neither `B-X` nor `I-X`."""
    count = 0
    for tags in tag_lists:
        previous = "O"
        for tag in tags:
            if tag.startswith("I-") and previous not in ("B-" + tag[2:], tag):
                count += 1
                break
            previous = tag
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", default="softmax,crf")
    parser.add_argument("--train_sentences", type=int, default=3000)
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--learning_rate", default="1e-4",
                        help="A number, or auto (run_finetuning's default).")
    parser.add_argument("--crf_learning_rate_multiplier", type=float, default=100.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--selection_fraction", type=float, default=0.1,
                        help="Share of the training sentences held out to choose the kept epoch "
                        "(0: choose on dev, whose F1 is then selected, not clean).")
    result_file.add_flags(parser, "ner_crf")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    # Kept between invocations (default kbert_ner_crf in the temporary directory): the
    # converted MiniLM and the runs are reused (benchmarks/distillation.py's --teacher_dir).
    args.work_dir = args.work_dir or os.path.join(tempfile.gettempdir(), "kbert_ner_crf")

    from kbert.checkpoints import load_finetuned
    from kbert.data import TextPreprocessor
    from kbert.tasks import NerConfig
    from kbert.tasks import NerTask
    from kbert.tasks import TaskData
    from kbert.training.finetuning import run_finetuning

    os.makedirs(args.work_dir, exist_ok=True)
    init = os.path.join(args.work_dir, "minilm")
    if not os.path.exists(os.path.join(init, "encoder.weights.h5")):
        subprocess.run([sys.executable, "-m", "kbert.bin.convert", "--source=minilm",
                        f"--output_dir={init}", f"--cache_dir={args.work_dir}/cache", "--overwrite"],
                       check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    subset = os.path.join(args.work_dir, "conll")
    _conll_subset(os.path.join(args.data_dir, "ner", "conll2003"), subset, args.train_sentences)
    options = {
        "softmax": NerConfig(),
        "crf": NerConfig(use_crf=True, crf_learning_rate_multiplier=args.crf_learning_rate_multiplier),
        "crf_unconstrained": NerConfig(use_crf=True, crf_bio_constraints=False,
                                       crf_learning_rate_multiplier=args.crf_learning_rate_multiplier),
        "frozen_last": NerConfig(freeze_encoder=True, features="last"),
        "frozen_concat_last_4": NerConfig(freeze_encoder=True, features="concat_last_4"),
    }
    rows = []
    for name in args.variants.split(","):
        model_dir = os.path.join(args.work_dir, "runs", name)
        start = time.time()
        results = run_finetuning(
            "ner", init, model_dir, data_dir=subset, do_train=True, do_eval=True,
            train_batch_size=32,
            learning_rate=args.learning_rate if args.learning_rate == "auto" else float(args.learning_rate),
            num_train_epochs=args.epochs,
            max_seq_length=96, seed=args.seed, selection_fraction=args.selection_fraction,
            verbose=2, task_options=options[name])
        minutes = (time.time() - start) / 60
        model, config, vocab_file = load_finetuned(model_dir)
        task = NerTask.from_description(config.to_dict())
        dev = task.read(TaskData(data_dir=subset), "dev")
        preprocessor = TextPreprocessor.from_vocab_file(vocab_file, config.do_lower_case,
                                                        config.max_seq_length)
        predicted = task._tag(model, dev, preprocessor, 64)
        row = dict(variant=name, f1=round(100 * results["f1"], 2),
                   precision=round(100 * results["precision"], 2),
                   recall=round(100 * results["recall"], 2),
                   invalid=invalid_sequences(predicted), sentences=len(dev),
                   gold_invalid=invalid_sequences(s.tags for s in dev),
                   steps=results["train_steps"], selection=results.get("selection"),
                   minutes=round(minutes, 1),
                   train_loss=results["train_loss"])
        print(json.dumps(row), flush=True)
        rows.append(row)
    reference = rows[0]
    print(f"\n| variant | dev entity F1 | P | R | dev sentences with invalid BIO | F1 - {reference['variant']} | steps | minutes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['variant']} | {r['f1']:.2f} | {r['precision']:.2f} | {r['recall']:.2f} | "
              f"{r['invalid']} of {r['sentences']} | {r['f1'] - reference['f1']:+.2f} | "
              f"{r['steps']} | {r['minutes']} |")
    result_file.write_result(
        args, name="ner_crf", title="NER: CRF head vs softmax head", area="fine-tuning",
        load_average_at_start=load,
        headline="CoNLL-2003 dev entity F1: " + ", ".join(
            f"{r['variant']} {r['f1']:.2f} ({r['invalid']} invalid BIO)" for r in rows)
            + f"; {args.train_sentences:,} training sentences.",
        reference=f"the {reference['variant']} head on the same encoder, data, steps and seed, "
                  "same run",
        aim="", met=None,
        selection=("selected on dev: kept epoch chosen on dev" if args.selection_fraction == 0 else
                   f"clean: kept epoch chosen on {args.selection_fraction:.0%} of the training "
                   "sentences held out"),
        figures=rows, method=__doc__.split("\n\n    PYTHONPATH")[0])


if __name__ == "__main__":
    main()
