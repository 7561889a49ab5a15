"""kbert-pretrain: pre-train a BERT encoder with MLM (+NSP) under tf.distribute.

    kbert-pretrain --gin_file=gin/base.gin --dry_run
"""

from __future__ import annotations

from absl import flags

from kbert.bin import common

common.define_gin_flags()
flags.DEFINE_bool(
    "dry_run", False, "Build the pre-trainer from the gin config without data, print its "
    "parameter table and operative config, and exit."
)
FLAGS = flags.FLAGS


def dry_run() -> None:
    """Builds the configured pre-trainer and prints its parameters and config."""
    import gin

    from kbert import configurables
    from kbert.models.summary import parameter_table

    pretrainer = configurables.BertPretrainer()
    print(f"{'section':<32s}{'parameters':>14s}")
    for section, count in parameter_table(pretrainer):
        print(f"{section:<32s}{count:>14,d}")
    print(f"{'total':<32s}{pretrainer.count_params():>14,d}")
    print("\n# operative gin config\n" + gin.operative_config_str())
    print(f"parameters: encoder={pretrainer.encoder.count_params()} "
          f"pretrainer={pretrainer.count_params()}")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS.gin_file:
        raise ValueError("--gin_file is required, e.g. --gin_file=gin/base.gin")
    from kbert import configurables

    configurables.parse_gin(FLAGS.gin_file, FLAGS.gin_params)
    if FLAGS.dry_run:
        dry_run()
        return
    raise ValueError("training is not implemented yet; pass --dry_run")


def run() -> None:
    common.run(main)


if __name__ == "__main__":
    run()
