"""kbert-export: write a model as a TF Serving SavedModel that takes raw text.

    kbert-export --model_dir=runs/sst2 --export_dir=export/sst2          # -> export/sst2/1
    kbert-export --model_dir=runs/pretrained --export_dir=export/embed   # embedding model
    kbert-export --check_ops --export_dir=export/sst2                    # check the latest version
    kbert-export --model_dir=runs/sst2 --export_dir=export/sst2-int8 --quantize=int8

Every export is checked (loaded in a fresh process with only tensorflow and
tensorflow_text) before it is published with an atomic rename.
"""

from __future__ import annotations

import os

from absl import flags

from kbert.bin import common

flags.DEFINE_string("model_dir", None, "A kbert-finetune model_dir (task_config.json) to export its task, "
                    "or a pre-trained directory (bert_config.json, encoder.weights.h5, vocab.txt) to "
                    "export a sentence-embedding model.")
flags.DEFINE_string("export_dir", None, "<base>/<model_name>: the version directory is written below it, "
                    "as TF Serving's --model_base_path expects. With --check_ops: a version directory, "
                    "or a base whose latest version is checked.")
flags.DEFINE_integer("version", None, "Version number to write. Defaults to one more than the highest "
                     "version already in --export_dir (1 if none).")
flags.DEFINE_integer("max_seq_length", None, "Embedding exports only: longest input in wordpieces "
                     "(defaults to 128, or the encoder's max_sequence_length if smaller).")
flags.DEFINE_string("feature_layers", None, "Embedding exports only: the blocks the `features` "
                    "signature returns, as extract_features.py's --layers (default -1,-2,-3,-4; "
                    "negative counts from the last).")
flags.DEFINE_bool("check_ops", False, "Do not export: check --export_dir loads with only tensorflow + "
                  "tensorflow_text, list its ops, exit 1 if any other op is needed.")
flags.DEFINE_bool("skip_ops_check", False, "Publish without the fresh-process ops check (faster, for "
                  "trusted pipelines).")
common.define_quantization_flags()
FLAGS = flags.FLAGS


def check(export_dir: str) -> None:
    from kbert.export.ops_check import check_ops
    from kbert.export.saved_model import versions

    path = export_dir
    if not os.path.exists(os.path.join(path, "saved_model.pb")) and versions(path):
        path = os.path.join(path, str(versions(path)[-1]))
    if not os.path.exists(os.path.join(path, "saved_model.pb")):
        raise FileNotFoundError(f"--export_dir={export_dir} holds no SavedModel (no saved_model.pb in it "
                                "or in a numbered version below it).")
    report = check_ops(path)
    print(report.message())
    if not report.ok:
        raise SystemExit(1)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS.export_dir:
        raise ValueError("--export_dir is required, e.g. --export_dir=export/sst2")
    if FLAGS.check_ops:
        check(FLAGS.export_dir)
        return
    if not FLAGS.model_dir:
        raise ValueError("--model_dir is required: a kbert-finetune model_dir or a pre-trained directory.")
    import logging

    from kbert.export.saved_model import export_saved_model

    logging.getLogger("kbert.export").setLevel(logging.INFO)

    path = export_saved_model(FLAGS.model_dir, FLAGS.export_dir, version=FLAGS.version,
                              max_seq_length=FLAGS.max_seq_length, check=not FLAGS.skip_ops_check,
                              feature_layers=FLAGS.feature_layers, **common.quantization_options())
    if FLAGS.quantize:
        print(f"kbert-export: {common.quantization_line(path)}")
    print(f"kbert-export: wrote {path}")


def run() -> None:
    common.run(main)


if __name__ == "__main__":
    run()
