"""kbert-distill: distill a fine-tuned model into a smaller, faster student of the same task.

    kbert-distill --teacher_dir=runs/sst2 --student_layers=0,2,4 \\
        --data_dir=glue_data/SST-2 --model_dir=runs/sst2-l3 --do_train --do_eval
    kbert-distill --teacher_dir=runs/conll --student_gin_file=gin/mini.gin \\
        --data_dir=conll2003 --model_dir=runs/conll-mini --do_train --do_eval \\
        --gin_params='run_distillation.hidden_state_weight = 1.0'
    kbert-distill --teacher_dir=runs/stsb-similarity --student_layers=0,2,4 \
        --data_dir=glue_data/STS-B --model_dir=runs/stsb-l3 --do_train --do_eval

With --do_train --do_eval the student is scored on dev after every epoch and
the best step is kept, as kbert-finetune does. The student directory is an ordinary fine-tuned directory: kbert-export and
kbert-serve take it as they take kbert-finetune's.
"""

from __future__ import annotations

import json
import logging
import os

from absl import flags

from kbert.bin import common
from kbert.tasks import trainable_tasks

common.define_gin_flags()
flags.DEFINE_string("teacher_dir", None, "The fine-tuned teacher: a kbert-finetune --model_dir. "
                    "Its task, labels, vocabulary and max_seq_length are the student's.")
flags.DEFINE_list("student_layers", None, "Teacher blocks (0-based) copied into a student of "
                  "the teacher's width, with its embeddings and head (DistilBERT), e.g. 0,2,4.")
flags.DEFINE_string("student_gin_file", None, "Model gin file of the student encoder's sizes "
                    "(e.g. gin/mini.gin), any width; starts from scratch or from "
                    "--student_init_checkpoint. Vocabulary and positions are the teacher's.")
flags.DEFINE_string("student_init_checkpoint", None, "Pre-trained directory whose encoder "
                    "starts the --student_gin_file student; its vocab.txt must be the teacher's.")
flags.DEFINE_string("model_dir", None, "Output: the student's fine-tuned directory, "
                    "eval_results.json (with the teacher's figures) and operative_config.gin.")
flags.DEFINE_string("transfer_file", None, "Unlabelled inputs to distill on, one per line: "
                    "text (text<TAB>text_pair for pair tasks) for GLUE, space-separated words "
                    "for NER. The label loss is then off. Default: the task's training split.")
flags.DEFINE_enum("task", None, list(trainable_tasks()), "When given, must be the teacher's task.")
flags.DEFINE_string("task_name", None, "When given, must be the teacher's (e.g. sst-2).")
flags.DEFINE_string("data_dir", None, "The task's data folder (GLUE task folder or CoNLL "
                    "folder): train split (unless --transfer_file) and dev split.")
flags.DEFINE_string("train_file", None, "The training file of a teacher fine-tuned on your own "
                    "files (--task=classification or token_classification; .csv, .tsv, .jsonl "
                    "or .parquet with the columns it was fine-tuned on).")
flags.DEFINE_string("validation_file", None, "Its dev file (for --do_eval).")
flags.DEFINE_bool("do_train", False, "Train the student.")
flags.DEFINE_bool("do_eval", False, "Evaluate student and teacher on the dev split.")
flags.mark_flags_as_required(["teacher_dir", "model_dir"])
FLAGS = flags.FLAGS

DEFAULT_GIN = "distill.gin"


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")
    from kbert import configurables

    logging.getLogger("kbert").setLevel(logging.INFO)
    logging.basicConfig(format="%(message)s")
    gin_files = [DEFAULT_GIN, *(FLAGS.gin_file or [])]
    if FLAGS.student_gin_file:
        gin_files.insert(1, FLAGS.student_gin_file)
    configurables.parse_gin(gin_files, FLAGS.gin_params)
    results = configurables.run_distillation(
        teacher_dir=FLAGS.teacher_dir,
        model_dir=FLAGS.model_dir,
        student_layers=_student_layers(),
        build_student_encoder=configurables.BertEncoder if FLAGS.student_gin_file else None,
        student_init_checkpoint=FLAGS.student_init_checkpoint,
        transfer_file=FLAGS.transfer_file,
        task=FLAGS.task,
        task_name=FLAGS.task_name,
        data_dir=FLAGS.data_dir,
        train_file=FLAGS.train_file,
        validation_file=FLAGS.validation_file,
        do_train=FLAGS.do_train,
        do_eval=FLAGS.do_eval,
    )
    _write_summary(results)


def _student_layers() -> list[int] | None:
    if FLAGS.student_layers is None:
        return None
    try:
        return [int(value) for value in FLAGS.student_layers]
    except ValueError:
        raise ValueError(f"--student_layers={','.join(FLAGS.student_layers)}: expected teacher "
                         "layer numbers separated by commas, e.g. 0,2,4.") from None


def _write_summary(results: dict) -> None:
    import gin
    import tensorflow as tf

    from kbert.files import write_text

    write_text(os.path.join(FLAGS.model_dir, "operative_config.gin"), gin.operative_config_str())
    print("***** distillation *****")
    teacher, student = results["teacher_parameters"], results["student_parameters"]
    print(f"  parameters: teacher {teacher:,}, student {student:,} ({student / teacher:.2f}x)")
    metric = results.get("main_metric")
    if metric and metric in results:
        ratio = results[metric] / results["teacher"][metric] if results["teacher"][metric] else 0
        print(f"  dev {metric}: teacher {results['teacher'][metric]:.4f}, student "
              f"{results[metric]:.4f} ({ratio:.3f} of the teacher's)")
    for size, figures in results["speedup"].items():
        print(f"  inference {size.replace('_', ' ')}: teacher {figures['teacher_ms']:.2f} ms, "
              f"student {figures['student_ms']:.2f} ms, speed-up {figures['speedup']:.2f}x")
    if "best_step" in results:
        chosen_on = ("dev" if results.get("selection", {}).get("split", "dev") == "dev"
                     else "held-out training")
        print(f"  kept: the student of step {results['best_step']} of {results['train_steps']} "
              f"(best {chosen_on} {metric})")
    if "train_loss" in results:
        print(f"  train loss by epoch: {', '.join(f'{v:.4f}' for v in results['train_loss'])}")
    for warning in results.get("warnings", []):
        print(f"WARNING: {warning}")
    listing = sorted(tf.io.gfile.listdir(FLAGS.model_dir))
    print(f"written to {FLAGS.model_dir}: {json.dumps(listing)}{common.warned(results)}")


def run() -> None:
    common.run(main)


if __name__ == "__main__":
    run()
