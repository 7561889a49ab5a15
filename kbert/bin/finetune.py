"""kbert-finetune: fine-tune a pre-trained encoder for any trainable task of `kbert.tasks.TASKS`.

Your own labelled files (`--task=classification`: single-label, multi-label,
regression, pairs; CSV, TSV, JSON lines, Parquet), GLUE classification/regression,
CoNLL-2003 NER, SQuAD span QA, sentence similarity, dense retrieval and re-ranking:

    kbert-finetune --task=classification --train_file=tickets.csv \\
        --validation_file=tickets_dev.csv --init_checkpoint=minilm/ --model_dir=runs/tickets \\
        --do_train --do_eval
    kbert-finetune --task=glue --task_name=sst-2 --data_dir=glue_data/SST-2 \\
        --init_checkpoint=minilm/ --model_dir=runs/sst2 --do_train --do_eval
    kbert-finetune --task=squad --train_file=train-v1.1.json --predict_file=dev-v1.1.json \\
        --init_checkpoint=minilm/ --model_dir=runs/squad \\
        --gin_params='run_finetuning.max_seq_length = 384'
    kbert-finetune ... --export_dir=export/sst2 --quantize=int8    # an int8 serving SavedModel
    kbert-finetune ... --do_train --do_eval --compare_with_random_init  # did pre-training help?
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import os

from absl import flags

from kbert.bin import common
from kbert.tasks import trainable_tasks

common.define_gin_flags()
flags.DEFINE_enum("task", None, list(trainable_tasks()),
                  "Task to fine-tune: a trainable task of kbert.tasks.TASKS.")
flags.DEFINE_string("task_name", None, "GLUE task (cola, sst-2, mrpc, sts-b, qqp, mnli, "
                    "mnli-mm, qnli, rte, wnli), as run_classifier.py; for NER the dataset name "
                    "stored in task_config.json (default conll2003).")
flags.DEFINE_string("data_dir", None, "GLUE task folder (train.tsv, dev.tsv, test.tsv) or CoNLL "
                    "folder (train.txt, dev.txt or valid.txt, test.txt).")
flags.DEFINE_string("train_file", None, "File to train on: SQuAD JSON; or your own labelled "
                    "file (.csv, .tsv, .jsonl/.json, .parquet; text formats may be .gz) for "
                    "--task=classification and --task=token_classification.")
flags.DEFINE_string("predict_file", None, "SQuAD JSON to evaluate (--do_eval) or predict on "
                    "(--do_predict); predictions.json is written for it.")
flags.DEFINE_string("validation_file", None, "Your own dev file (same formats as --train_file), "
                    "scored with --do_eval. Without it the kept model is chosen on a held-out "
                    "share of --train_file and no reported figure exists.")
flags.DEFINE_string("test_file", None, "Your own test file, predicted with --do_predict (its "
                    "labels, when present, are checked against the training file's).")
common.define_text_column_flags()
flags.DEFINE_string("label_column_name", None, "Column holding the labels of your files "
                    "(default: label; ner_tags for token classification).")
flags.DEFINE_string("init_checkpoint", None, "Pre-trained directory (a kbert-pretrain model_dir "
                    "or kbert-convert output); without --do_train also a fine-tuned model_dir.")
flags.DEFINE_string("model_dir", None, "Output: fine-tuned model directory, eval_results.json, "
                    "operative_config.gin and predictions.")
flags.DEFINE_string("vocab_file", None, "WordPiece vocabulary; defaults to --init_checkpoint's "
                    "vocab.txt and must match it.")
flags.DEFINE_bool("do_lower_case", None, "Lower case and strip accents; defaults to "
                  "--init_checkpoint's tokenizer_config.json, else True.")
flags.DEFINE_bool("do_train", False, "Train on the train split / --train_file.")
flags.DEFINE_bool("do_eval", False, "Evaluate on the dev split / --predict_file; metrics go to "
                  "model_dir/eval_results.json.")
flags.DEFINE_bool("do_predict", False, "Predict the test split (predictions.tsv) or "
                  "--predict_file (predictions.json).")
flags.DEFINE_enum("strategy", "default", ["default", "one_device", "mirrored"],
                  "tf.distribute strategy: default (no distribution), one_device, mirrored "
                  "(all local GPUs).")
flags.DEFINE_string("export_dir", None, "After fine-tuning, export a raw-text serving "
                    "SavedModel to <export_dir>/<next version>/, as kbert-export does.")
common.define_quantization_flags(with_export_dir=True)
flags.DEFINE_integer("num_restarts", 1, "Train this many times with seeds seed, seed+1, ... "
                     "and keep the best on dev (the BERT paper's remedy for small data sets); "
                     "needs --do_train --do_eval.")
flags.DEFINE_bool("hparam_search", False, "Train every combination of --search_learning_rates, "
                  "--search_batch_sizes and --search_epochs within --search_time_budget_minutes, "
                  "keep the best on dev, print the table and write its configuration to "
                  "model_dir/best_hparams.gin (reuse it with --gin_file).")
flags.DEFINE_list("search_learning_rates", None, "Rates of --hparam_search; default by encoder "
                  "width: 3e-4,1e-4,5e-5,3e-5 (google-research/bert's small BERTs), or "
                  "5e-5,4e-5,3e-5,2e-5 (the BERT paper) from hidden size 768.")
flags.DEFINE_list("search_batch_sizes", ["16", "32"], "Batch sizes of --hparam_search.")
flags.DEFINE_list("search_epochs", ["2", "3", "4"], "Epoch counts of --hparam_search.")
flags.DEFINE_float("search_time_budget_minutes", 60.0, "--hparam_search starts no trial that "
                   "would end past this (estimated from the trials so far).")
flags.DEFINE_bool("freeze_encoder", None, "Feature-based fine-tuning (the BERT paper, 5.3): the "
                  "encoder's weights stay fixed and only the head learns; glue, classification, "
                  "ner and token_classification. Same as binding GlueConfig.freeze_encoder "
                  "(ClassificationConfig., NerConfig., TokenClassificationConfig.).")
flags.DEFINE_enum("features", None, ["last", "sum_last_4", "concat_last_4", "weighted"],
                  "What the head reads instead of the default output: a mix of the encoder's "
                  "layers (weighted = ELMo's learned softmax mix); glue, classification, ner and "
                  "token_classification. Same as binding GlueConfig.features "
                  "(ClassificationConfig., NerConfig., TokenClassificationConfig.).")
flags.DEFINE_bool("compare_with_random_init", False, "After fine-tuning, fine-tune a "
                  "never-pre-trained encoder of --init_checkpoint's shape with the same settings "
                  "and seed (into --model_dir/random_init) and print both dev scores and the "
                  "difference. Needs --do_train --do_eval.")
flags.mark_flags_as_required(["task", "init_checkpoint", "model_dir"])
FLAGS = flags.FLAGS

DEFAULT_GIN = "finetune.gin"


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")
    if FLAGS.quantize:  # refused before training, not after it
        from kbert.export.numeric_formats import check_quantize

        if not FLAGS.export_dir:
            raise ValueError(f"--quantize={FLAGS.quantize} quantizes the export: give --export_dir "
                             "too (or run kbert-export --quantize on the model_dir later).")
        check_quantize(FLAGS.quantize)
    if FLAGS.compare_with_random_init and not (FLAGS.do_train and FLAGS.do_eval):
        raise ValueError("--compare_with_random_init compares two fine-tuning runs' dev "
                         "scores: give --do_train --do_eval too.")
    from kbert import configurables

    logging.getLogger("kbert").setLevel(logging.INFO)
    logging.basicConfig(format="%(message)s")
    configurables.parse_gin(FLAGS.gin_file or [DEFAULT_GIN], FLAGS.gin_params)
    results = _run_finetuning(configurables)
    _write_summary(results)
    if FLAGS.compare_with_random_init:
        _compare_with_random_init(configurables, results)
    if FLAGS.export_dir:
        from kbert.export import export_saved_model

        path = export_saved_model(FLAGS.model_dir, FLAGS.export_dir,
                                  **common.quantization_options())
        if FLAGS.quantize:
            print(common.quantization_line(path))
        print(f"exported to {path}")


def _run_finetuning(configurables, init_checkpoint: str | None = None,
                    model_dir: str | None = None) -> dict:
    return configurables.run_finetuning(
        task=FLAGS.task,
        init_checkpoint=init_checkpoint or FLAGS.init_checkpoint,
        model_dir=model_dir or FLAGS.model_dir,
        task_name=FLAGS.task_name,
        data_dir=FLAGS.data_dir,
        train_file=FLAGS.train_file,
        predict_file=FLAGS.predict_file,
        validation_file=FLAGS.validation_file,
        test_file=FLAGS.test_file,
        text_column_names=common.text_column_names(),
        label_column_name=FLAGS.label_column_name,
        vocab_file=FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case,
        do_train=FLAGS.do_train,
        do_eval=FLAGS.do_eval,
        do_predict=FLAGS.do_predict,
        strategy=FLAGS.strategy,
        task_options=_with_feature_flags(configurables.task_options(FLAGS.task)),
        num_restarts=FLAGS.num_restarts,
        hparam_grid=_hparam_grid() if FLAGS.hparam_search else None,
    )


def _compare_with_random_init(configurables, results: dict) -> None:
    """The same fine-tuning from a never-pre-trained encoder; both scores and the difference."""
    import tempfile

    import gin
    import tensorflow as tf

    from kbert.files import write_text
    from kbert.training.finetuning import random_init

    try:
        seed = int(gin.query_parameter("run_finetuning.seed"))
    except ValueError:  # not bound: run_finetuning's default
        seed = inspect.signature(configurables.run_finetuning).parameters["seed"].default
    output_dir = os.path.join(FLAGS.model_dir, random_init.RANDOM_INIT_DIR)
    encoder_dir = tempfile.mkdtemp(prefix="kbert-random-init-")
    try:
        random_init.never_pretrained_directory(FLAGS.init_checkpoint, encoder_dir, seed)
        print(f"***** fine-tuning a never-pre-trained encoder (seed {seed}) into {output_dir} "
              "*****", flush=True)
        baseline = _run_finetuning(configurables, init_checkpoint=encoder_dir,
                                   model_dir=output_dir)
    finally:
        tf.io.gfile.rmtree(encoder_dir)
    # The same bindings as the run it is compared with (seed included).
    write_text(os.path.join(output_dir, "operative_config.gin"), gin.operative_config_str())
    comparison = random_init.compare_scores(results, baseline)
    write_text(os.path.join(FLAGS.model_dir, random_init.COMPARISON_FILE),
               json.dumps(comparison, indent=2, sort_keys=True) + "\n")
    for warning in baseline.get("warnings", []):
        print(f"WARNING (never pre-trained run): {warning}")
    print(random_init.format_comparison(comparison))


def _with_feature_flags(options):
    """The task's gin-bound config with --freeze_encoder / --features applied."""
    given = {name: FLAGS[name].value for name in ("freeze_encoder", "features")
             if FLAGS[name].value is not None}
    fields = {field.name for field in dataclasses.fields(options)}
    for name in given:
        if name not in fields:
            raise ValueError(f"--{name}: --task={FLAGS.task} has no feature-based mode; it "
                             "applies to --task=glue, classification, ner and token_classification.")
    return dataclasses.replace(options, **given)


def _hparam_grid():
    from kbert.training.finetuning.hparam_search import HparamGrid

    def numbers(flag: str, kind: type) -> tuple | None:
        values = FLAGS[flag].value
        try:
            return None if values is None else tuple(kind(v) for v in values)
        except ValueError:
            raise ValueError(f"--{flag}={','.join(values)}: expected {kind.__name__} values "
                             "separated by commas.") from None

    return HparamGrid(numbers("search_learning_rates", float), numbers("search_batch_sizes", int),
                      numbers("search_epochs", float), FLAGS.search_time_budget_minutes)


def _write_summary(results: dict) -> None:
    import gin
    import tensorflow as tf

    from kbert.files import write_text
    from kbert.training.finetuning.summary import summary_lines

    write_text(os.path.join(FLAGS.model_dir, "operative_config.gin"), gin.operative_config_str())
    print("\n".join(summary_lines(results, FLAGS.model_dir)))
    for warning in results.get("warnings", []):
        print(f"WARNING: {warning}")
    print(f"written to {FLAGS.model_dir}: " + json.dumps(sorted(tf.io.gfile.listdir(FLAGS.model_dir)))
          + common.warned(results))


def run() -> None:
    common.run(main)


if __name__ == "__main__":
    run()
