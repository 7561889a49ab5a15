"""kbert-pretrain: pre-train a BERT encoder with MLM (+NSP) or ELECTRA under tf.distribute.

    kbert-pretrain --gin_file=gin/base.gin --dry_run
    kbert-pretrain --gin_file=gin/electra_small.gin --input_file=... --model_dir=out/electra
    kbert-pretrain --gin_file=gin/tiny.gin --input_file='data/train-*.tfrecord' \\
        --eval_input_file='data/heldout-*.tfrecord' --model_dir=out/tiny \\
        --gin_params='run_pretraining.num_train_steps = 10000'
    kbert-pretrain --gin_file=gin/continue_pretraining.gin --init_checkpoint=out/minilm \\
        --input_file='domain/train-*.tfrecord' --eval_input_file='domain/heldout-*.tfrecord' \\
        --model_dir=out/minilm-domain
    kbert-pretrain --gin_file=gin/modernbert_context_extension.gin --init_checkpoint=out/mb_1024 \\
        --input_file='long/train-*.tfrecord' --model_dir=out/mb_8192
    kbert-pretrain --nodo_train --do_eval --init_checkpoint=out/converted \\
        --eval_input_file='data/heldout-*.tfrecord' --model_dir=out/eval_converted

Re-running the same command after a crash resumes from the last checkpoint in
`--model_dir`; Ctrl-C (SIGINT) or SIGTERM first finishes the step, saves a checkpoint
there and exits 130 / 143 with one line saying so. Hyperparameters are gin bindings
(see gin/pretrain.gin; `gin/modernbert_base.gin` carries ModernBERT's recipe, docs/pretraining.md,
"ModernBERT"); the encoder's vocabulary size comes from the data's sidecar (or `--vocab_file`)
unless your own gin file or `--gin_params` sets `BertEncoder.vocabulary_size`.
With `--init_checkpoint`, the encoder (sizes, activation, LayerNorm epsilon,
vocabulary) is the directory's: a gin file need bind no size, a binding that
contradicts the directory is an error, and the data must have been made with
the directory's `vocab.txt` (see docs/pretraining.md, "Continue pre-training
on your domain").
`--eval_input_file` evaluates held-out data every `run_pretraining.eval_every_steps`
(default: each checkpoint), at the end and, from `--init_checkpoint`, before the first
step (step 0: the "before" figure; see docs/pretraining.md, "Is my pre-training working?").
"""

from __future__ import annotations

import functools
import os

from absl import flags
from absl import logging

from kbert.bin import common

common.define_gin_flags()
flags.DEFINE_string(
    "input_file", None, "Pre-training TFRecords (comma-separated files or globs, gs:// works), "
    "made by tools/create_pretraining_data.py or google-research/bert's tool.")
flags.DEFINE_string("model_dir", None, "Where checkpoints, TensorBoard events, "
                    "operative_config.gin, summary.json and the pre-trained model are written.")
flags.DEFINE_string("strategy", "default", "Distribution strategy: default, one_device, "
                    "mirrored (local GPUs), multi_worker_mirrored (reads TF_CONFIG) or tpu.")
flags.DEFINE_string("tpu", None, "TPU name or grpc://address for --strategy=tpu; empty means "
                    "the local TPU VM.")
flags.DEFINE_integer("num_gpus", None, "GPUs used by --strategy=mirrored/one_device "
                     "(default: all visible).")
flags.DEFINE_integer("num_cpu_devices", None, "Split the CPU into this many logical devices; "
                     "--strategy=mirrored replicates over them when there is no GPU.")
flags.DEFINE_string("init_checkpoint", None, "Pre-trained directory to continue (weights "
                    "only), e.g. a kbert-convert output; its sizes, activation and LayerNorm "
                    "epsilon are used (no size gin file needed). Ignored when --model_dir has a "
                    "checkpoint.")
flags.DEFINE_string("vocab_file", None, "The tokenizer file the data was made with (a vocab.txt "
                    "or a byte-level BPE tokenizer.json), copied into --model_dir so fine-tuning "
                    "and export find it; data made with another is refused (default: the one "
                    "named by the data's sidecar).")
flags.DEFINE_bool("do_lower_case", None, "Whether the data was lower-cased; recorded in "
                  "--model_dir (default: the data's sidecar value).")
flags.DEFINE_string(
    "eval_input_file", None, "Held-out pre-training TFRecords (comma-separated files or globs, "
    "gs:// works) evaluated every run_pretraining.eval_every_steps and at the end; results in "
    "--model_dir/eval_results.json, eval_history.jsonl and TensorBoard's eval/.")
flags.DEFINE_bool("do_train", True, "Train (google-research/bert's flag). --nodo_train --do_eval "
                  "evaluates --model_dir's latest checkpoint or --init_checkpoint and exits.")
flags.DEFINE_bool("do_eval", False, "Evaluate --eval_input_file (--eval_input_file alone "
                  "already turns on the periodic evaluation while training).")
flags.DEFINE_bool(
    "dry_run", False, "Build the pre-trainer from the gin config without data, print its "
    "parameter table and operative config, and exit."
)
FLAGS = flags.FLAGS
OPERATIVE_CONFIG = "operative_config.gin"


def dry_run() -> None:
    """Builds the configured pre-trainer and prints its parameters and config."""
    import gin
    import tensorflow as tf

    from kbert import configurables
    from kbert.models.summary import parameter_table

    # Built in a graph, its variables are graph ops that never run: the counts need
    # shapes only, and drawing large.gin's 336M initial values eagerly took 8 of the
    # build's 14 seconds on a 2-core CPU.
    with tf.Graph().as_default():
        pretrainer = configurables.pretrainer()
    print(f"{'section':<32s}{'parameters':>14s}")
    for section, count in parameter_table(pretrainer):
        print(f"{section:<32s}{count:>14,d}")
    print(f"{'total':<32s}{pretrainer.count_params():>14,d}")
    print("\n# operative gin config\n" + gin.operative_config_str())
    print(f"parameters: encoder={pretrainer.encoder.count_params()} "
          f"pretrainer={pretrainer.count_params()}")


def train() -> None:
    """Builds the strategy and runs `run_pretraining` with the gin hyperparameters."""
    import gin

    from kbert import configurables
    from kbert import training
    from kbert.files import write_text

    required = ("input_file", "model_dir") if FLAGS.do_train else ("model_dir",)
    for name in required:
        if not FLAGS[name].value:
            raise ValueError(f"--{name} is required (or pass --dry_run).")
    if FLAGS.do_eval and not FLAGS.eval_input_file:
        raise ValueError("--do_eval needs --eval_input_file (held-out TFRecords made by "
                         "tools/create_pretraining_data.py).")
    if not FLAGS.do_train and not FLAGS.do_eval:
        raise ValueError("--nodo_train leaves nothing to do; add --do_eval "
                         "--eval_input_file=... to evaluate a checkpoint.")
    if FLAGS.input_file and not FLAGS.init_checkpoint:
        # A continued run's vocabulary is the directory's (encoder_from_directory
        # bound it), and the data must have been made with it.
        configurables.vocabulary_size_from_data(FLAGS.input_file, FLAGS.vocab_file,
                                                FLAGS.gin_file, FLAGS.gin_params)
    strategy = training.create_strategy(FLAGS.strategy, tpu=FLAGS.tpu, num_gpus=FLAGS.num_gpus,
                                        num_cpu_devices=FLAGS.num_cpu_devices)
    chief = training.is_chief(strategy)

    def build_pretrainer():
        pretrainer = configurables.pretrainer()
        # run_pretraining and the model configurables have now been called, so
        # the operative config is complete before the first step.
        # Evaluation only leaves the training run's own config as it is.
        if chief and FLAGS.do_train:
            write_text(os.path.join(FLAGS.model_dir, OPERATIVE_CONFIG), gin.operative_config_str())
        return pretrainer

    configurables.run_pretraining(
        input_file=FLAGS.input_file,
        model_dir=FLAGS.model_dir,
        build_pretrainer=build_pretrainer,
        strategy=strategy,
        init_checkpoint=FLAGS.init_checkpoint,
        vocab_file=FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case,
        print_fn=functools.partial(print, flush=True),
        eval_input_file=FLAGS.eval_input_file,
        do_train=FLAGS.do_train,
    )


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")
    run_config = _training_run_config()
    # Evaluating a pre-trained directory builds the model from it, and a training run's
    # checkpoint from the run's own operative_config.gin: no gin file needed.
    evaluates_directory = not FLAGS.do_train and (FLAGS.init_checkpoint or run_config)
    if not FLAGS.gin_file and not evaluates_directory:
        raise ValueError("--gin_file is required, e.g. --gin_file=gin/base.gin")
    from kbert import configurables

    # TF logs every checkpoint write at INFO; progress lines go to stdout.
    logging.set_verbosity(logging.WARNING)
    configurables.parse_gin(([run_config] if run_config else []) + (FLAGS.gin_file or []),
                            FLAGS.gin_params)
    if FLAGS.init_checkpoint and FLAGS.do_train:
        # Continue the directory's own encoder: its sizes and numerics, no size gin file.
        configurables.encoder_from_directory(FLAGS.init_checkpoint)
    if FLAGS.dry_run:
        dry_run()
        return
    train()


def _training_run_config() -> str | None:
    """`--model_dir/operative_config.gin` when `--nodo_train` evaluates that run's checkpoint.

    The run's own config builds the model its checkpoint was saved from; `--gin_file`
    and `--gin_params` still apply on top of it.
    """
    import tensorflow as tf

    if FLAGS.do_train or not FLAGS.model_dir:
        return None
    path = os.path.join(FLAGS.model_dir, OPERATIVE_CONFIG)
    if tf.train.latest_checkpoint(FLAGS.model_dir) and tf.io.gfile.exists(path):
        return path
    return None


def run() -> None:
    common.run(main)


if __name__ == "__main__":
    run()
