"""kbert-predict: a fine-tuned model's answers for every row of a file, streamed, in input order.

    kbert-predict --model_dir=runs/tickets --input_file=new_tickets.csv \\
        --output_file=predictions.jsonl

The input is any file kbert-finetune reads (.csv, .tsv, .jsonl/.json, .parquet;
text formats may be .gz); the output is JSON lines (or CSV, .csv/.tsv) with each
input row's columns (ids ride along) and the model's answer: `label`, `score`
and `probabilities` (single-label), `labels` and `probabilities` (multi-label),
`prediction` (regression), `entities` (token classification). An input column
named as an answer is carried as `input_<name>`. The text columns default to
those the model was trained with. The task answers through its own
`examples_from_values` and `predict_records`; this binary names no task.
"""

from __future__ import annotations

import os
import time

from absl import flags

from kbert.bin import common

flags.DEFINE_string("model_dir", None, "A fine-tuned directory (kbert-finetune's --model_dir, "
                    "with task_config.json).")
flags.DEFINE_string("input_file", None, "Rows to predict: .csv, .tsv, .jsonl/.json or .parquet "
                    "(text formats may be .gz).")
flags.DEFINE_string("output_file", None, "Where the answers go: .jsonl (JSON lines) or .csv/.tsv, "
                    "written to a temporary name and renamed when complete.")
common.define_text_column_flags()
flags.DEFINE_integer("batch_size", 64, "Rows per model call.")
flags.DEFINE_integer("max_seq_length", None, "Longest input in pieces; defaults to the length "
                     "the model was fine-tuned with (task_config.json), at most the encoder's.")
flags.mark_flags_as_required(["model_dir", "input_file", "output_file"])
FLAGS = flags.FLAGS

# Rows handed to the model at a time: the progress bar moves and memory stays bounded.
CHUNK_ROWS = 2048


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")
    summary = predict_file(FLAGS.model_dir, FLAGS.input_file, FLAGS.output_file,
                           common.text_column_names(), FLAGS.batch_size, FLAGS.max_seq_length)
    print(f"kbert-predict: {summary['rows']} rows in {summary['seconds']:.1f} s "
          f"({summary['rows_per_second']:.1f} rows/s) -> {FLAGS.output_file}")


def predict_file(model_dir: str, input_file: str, output_file: str,
                 text_column_names: tuple[str, ...] | None = None, batch_size: int = 64,
                 max_seq_length: int | None = None, progress: bool = True) -> dict:
    """Writes the model's answer for every row of `input_file` to `output_file`, in order.

    Args:
        model_dir: str. A fine-tuned directory.
        input_file: str. The rows (any format `kbert.data.table_files` reads).
        output_file: str. JSON lines or CSV/TSV, by extension.
        text_column_names: tuple of str or None. The input columns; None: the trained ones.
        batch_size: int. Rows per model call.
        max_seq_length: int or None. None: the recorded length.
        progress: bool. Show a progress bar.

    Returns:
        dict: `rows`, `seconds`, `rows_per_second`.

    Raises:
        ValueError: an export or pre-trained directory, a bad file or row (named
            by its line); nothing is written then.
    """
    import keras

    from kbert.checkpoints import open_model_dir
    from kbert.data.table_files import TableWriter
    from kbert.data.table_files import iter_table
    from kbert.data.table_files import prediction_row
    from kbert.data.table_files import table_format
    from kbert.tasks import get_task

    if batch_size < 1:
        raise ValueError(f"--batch_size={batch_size}; it must be >= 1.")
    _refuse_other_directories(model_dir)
    table_format(input_file, "input_file")
    directory = open_model_dir(model_dir, flag="--model_dir")
    record = directory.task_config
    task = get_task(record.task).from_description(record.to_dict())
    columns = task.input_columns(text_column_names)
    preprocessor = directory.preprocessor(max_seq_length or record.max_seq_length)
    model = directory.model()
    bar = keras.utils.Progbar(None, unit_name="row", verbose=1 if progress else 0)
    start, rows_done = time.perf_counter(), 0
    with TableWriter(output_file) as writer:
        for found, rows in iter_table(input_file, "input_file"):
            _check_columns(columns, found, input_file)
            for begin in range(0, len(rows), CHUNK_ROWS):
                chunk = rows[begin:begin + CHUNK_ROWS]
                values = [[row.values.get(name) for row in chunk] for name in columns]
                examples = task.examples_from_values(
                    values[0] if len(values) == 1 else tuple(values),
                    source=[row.source for row in chunk])
                answers = task.predict_records(model, examples, preprocessor, batch_size)
                writer.write([prediction_row(row.values, answer)
                              for row, answer in zip(chunk, answers)])
                rows_done += len(chunk)
                bar.update(rows_done)
    seconds = time.perf_counter() - start
    return {"rows": rows_done, "seconds": seconds,
            "rows_per_second": rows_done / seconds if seconds else 0.0}


def _refuse_other_directories(model_dir: str) -> None:
    """A SavedModel export or a pre-trained directory gets what to do instead."""
    import tensorflow as tf

    from kbert.checkpoints.model_dir import model_dir_kind

    if not tf.io.gfile.isdir(model_dir):
        raise FileNotFoundError(f"--model_dir={model_dir} is not a directory.")
    exported = tf.io.gfile.exists(os.path.join(model_dir, "saved_model.pb")) or any(
        tf.io.gfile.exists(os.path.join(model_dir, name, "saved_model.pb"))
        for name in tf.io.gfile.listdir(model_dir) if name.strip("/").isdigit())
    if exported:
        raise ValueError(f"--model_dir={model_dir} is a SavedModel export; kbert-predict reads "
                         "the fine-tuned directory it was exported from (kbert-finetune's "
                         "--model_dir, with task_config.json). To answer with the export, serve "
                         f"it: kbert-serve --model_base_path={model_dir} (REST :predict or "
                         ":classify).")
    if model_dir_kind(model_dir) == "pretrained":
        raise ValueError(f"--model_dir={model_dir} is a pre-trained directory (no "
                         "task_config.json); fine-tune it first (kbert-finetune --task="
                         "classification ...) and pass that --model_dir.")


def _check_columns(columns: tuple[str, ...], found: tuple[str, ...], input_file: str) -> None:
    missing = [name for name in columns if name not in found]
    if missing:
        raise ValueError(f"--input_file={input_file}: no text column {missing[0]!r}; the columns "
                         f"found are {', '.join(found)}. Name yours with --text_column_names (the "
                         f"model reads {len(columns)} text column(s)).")


def run() -> None:
    common.run(main)


if __name__ == "__main__":
    run()
