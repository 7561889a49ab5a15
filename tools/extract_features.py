"""Per-token features from chosen layers of a kbert encoder, as google-research/bert's extract_features.py.

Reads one example per line (`text_a ||| text_b` for a pair) and writes one JSON
object per line, their layout: `{"linex_index": i, "features": [{"token":
"[CLS]", "layers": [{"index": -1, "values": [...]}, ...]}, ...]}`. Lines are
streamed `--batch_size` at a time, with progress on stderr; the output is
written to a temporary name and renamed when complete.

Example:

    python tools/extract_features.py --input_file=input.txt --output_file=features.jsonl \
      --init_checkpoint=models/minilm --layers=-1,-2,-3,-4 --max_seq_length=128
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("input_file", None, "Text file: one example per line, `text_a ||| text_b` for pairs.")
flags.DEFINE_string("output_file", None, "Where to write the JSON lines.")
flags.DEFINE_string("init_checkpoint", None,
                    "A kbert pre-trained or fine-tuned directory (bert_config.json, encoder.weights.h5).")
flags.DEFINE_string("vocab_file", None, "Defaults to --init_checkpoint's vocab.txt.")
flags.DEFINE_string("layers", "-1,-2,-3,-4",
                    "Layers to output, comma-separated; -1 is the last Transformer block.")
flags.DEFINE_integer("max_seq_length", 128, "Longest input in wordpieces; longer texts are cut.")
flags.DEFINE_integer("batch_size", 32, "Lines per encoder call.")
flags.DEFINE_bool("do_lower_case", None,
                  "Defaults to --init_checkpoint's tokenizer_config.json, else True.")


def _lines(path):
    import tensorflow as tf

    with tf.io.gfile.GFile(path) as f:
        for line in f:
            yield line


def extract(input_file, output_file, init_checkpoint, layers="-1,-2,-3,-4", max_seq_length=128,
            batch_size=32, vocab_file=None, do_lower_case=None, log=sys.stderr) -> int:
    """Writes the features of every line of `input_file` to `output_file`; returns the line count.

    Raises:
        ValueError: a bad setting (`--layers` out of range, `--max_seq_length`
            beyond the encoder's positions), naming it; nothing is written.
    """
    import tensorflow as tf

    from kbert.checkpoints import open_model_dir
    from kbert.files import temporary_name
    from kbert.layers import layer_indexes
    from kbert.tasks.embedding.features import extract_features
    from kbert.tasks.embedding.features import feature_json

    if not tf.io.gfile.exists(input_file):
        raise ValueError(f"--input_file={input_file} does not exist.")
    if batch_size < 1:
        raise ValueError(f"--batch_size={batch_size}; it must be at least 1.")
    checkpoint = open_model_dir(init_checkpoint, flag="--init_checkpoint", vocab_file=vocab_file,
                                do_lower_case=do_lower_case, vocab_flag="--vocab_file")
    indexes = layer_indexes(layers, checkpoint.encoder_config["num_layers"])
    # The numbers as given (e.g. -1), which the output's "index" fields repeat.
    numbers = [int(n) for n in layers.split(",") if n.strip()] if isinstance(layers, str) else list(layers)
    preprocessor = checkpoint.preprocessor(max_seq_length)
    vocab = checkpoint.vocabulary
    encoder = checkpoint.encoder(output_all_layers=True, dropout=0.0)
    temporary = temporary_name(output_file)
    start, count = time.time(), 0
    try:
        with tf.io.gfile.GFile(temporary, "w") as out:
            for count, example in enumerate(extract_features(
                    encoder, preprocessor, _lines(input_file), indexes, batch_size), start=1):
                out.write(json.dumps(feature_json(count - 1, example, vocab, numbers)) + "\n")
                if count % (batch_size * 10) == 0:
                    print(f"{count} lines, {count / (time.time() - start):.1f}/s", file=log, flush=True)
        tf.io.gfile.rename(temporary, output_file, overwrite=True)
    finally:
        if tf.io.gfile.exists(temporary):
            tf.io.gfile.remove(temporary)
    print(f"Wrote {count} lines to {output_file} in {time.time() - start:.1f} s.", file=log)
    return count


def main(argv):
    del argv
    from kbert.bin import common  # noqa: F401  Starts TensorFlow without its start-up notices.

    try:
        extract(FLAGS.input_file, FLAGS.output_file, FLAGS.init_checkpoint, FLAGS.layers,
                FLAGS.max_seq_length, FLAGS.batch_size, FLAGS.vocab_file, FLAGS.do_lower_case)
    except (ValueError, FileNotFoundError) as e:
        sys.exit(f"extract_features: error: {e}")


if __name__ == "__main__":
    flags.mark_flags_as_required(["input_file", "output_file", "init_checkpoint"])
    app.run(main)
