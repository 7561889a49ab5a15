"""`kbert-vocab build` and `tools/build_vocab.py`: learn a tokenizer from raw text.

The flags and the run of both front doors, defined once. `--tokenizer=wordpiece`
(the default) writes a BERT WordPiece `vocab.txt` laid out as the released BERT
vocabularies: `[PAD]` (id 0), `[unused0]`..`[unused{N-1}]`, `[UNK]`, `[CLS]`,
`[SEP]`, `[MASK]`, every character and its `##` form, then learned tokens (`##`
marks continuations); both tensorflow-text's `FastBertTokenizer` and
google-research/bert's `FullTokenizer` read it. `--tokenizer=bpe` writes a
byte-level BPE `tokenizer.json` laid out as ModernBERT's (NFC, GPT-2's
byte-level pre-tokenization, the learned merges, `[UNK] [CLS] [SEP] [PAD]
[MASK]`, `[unusedN]` up to a multiple of 64 ids; `kbert.data.vocab.bpe_learning`),
which Hugging Face `tokenizers` and kbert's in-graph tokenizer read. The same
input and flags give the same file, byte for byte. With --runner the corpus is
counted by an Apache Beam pipeline (DirectRunner here; Dataflow, Flink or Spark
at scale) and the tokenizer learned from the counts on this machine: the same
file; Beam's own options follow the tool's flags.

Only absl is imported here, so `--help` starts no TensorFlow; `build` imports
the library (`kbert.data.vocab`).
"""

from __future__ import annotations

import os
import time
from typing import Sequence

from absl import flags

TOKENIZERS = ("wordpiece", "bpe")
# --vocab_size's default per --tokenizer: bert-base's and ModernBERT's.
DEFAULT_VOCAB_SIZES = {"wordpiece": 30522, "bpe": 50368}
# Flags that shape a WordPiece vocab.txt only.
WORDPIECE_FLAGS = ("do_lower_case", "num_unused", "limit_alphabet")

flags.DEFINE_enum(
    "tokenizer", "wordpiece", TOKENIZERS,
    "What to learn: wordpiece (BERT's vocab.txt) or bpe (a byte-level BPE tokenizer.json laid "
    "out as ModernBERT's: NFC, GPT-2's byte-level pre-tokenization, [UNK] [CLS] [SEP] [PAD] "
    "[MASK], [unusedN] up to a multiple of 64 ids).")
flags.DEFINE_string("input_file", None, "Raw text file(s): comma-separated names or globs.")
flags.DEFINE_string("output_file", None, "Where to write vocab.txt (or, with --tokenizer=bpe, "
                    "tokenizer.json); or pass --output_dir.")
flags.DEFINE_string(
    "output_dir", None, "build: the directory to write vocab.txt and tokenizer_config.json "
    "(wordpiece) or tokenizer.json (bpe) into, created if missing; extend: the new pre-trained "
    "directory (written atomically).")
flags.DEFINE_integer("vocab_size", None, "Vocabulary size including reserved tokens (default "
                     "30522, bert-base's); with --tokenizer=bpe, rounded up to a multiple of 64 "
                     "and learned as far as the corpus allows (default 50368, ModernBERT's).")
flags.DEFINE_bool(
    "do_lower_case", True, "Lower case and strip accents: True for uncased models, False for "
    "cased (wordpiece only: a byte-level BPE is cased)."
)
flags.DEFINE_integer(
    "num_unused", 99, "[unusedN] placeholders after [PAD]; 99 gives bert-base's special ids "
    "(wordpiece only)."
)
flags.DEFINE_string("input_encoding", "utf-8", "Encoding of the input files, e.g. latin-1.")
flags.DEFINE_integer("min_frequency", 2, "Least count of a pair to merge.")
flags.DEFINE_integer(
    "limit_alphabet", 1000, "Most distinct characters kept (the most frequent); others become "
    "[UNK] (wordpiece only: a byte-level BPE has every byte)."
)
flags.DEFINE_string(
    "runner", None,
    "Count the corpus with an Apache Beam pipeline on this runner (DirectRunner, DataflowRunner, "
    "FlinkRunner, SparkRunner; needs the beam extra: pip install -e '.[beam]'), then learn here; "
    "other options on the command line go to Beam. Default: read the corpus here. Does not "
    "change the output.",
)
FLAGS = flags.FLAGS


def build(pipeline_args: Sequence[str] = ()) -> None:
    """Learns the tokenizer the flags describe, writes it and prints one line.

    Args:
        pipeline_args: list of str. Apache Beam's own options (with `--runner`).

    Raises:
        ValueError: Beam options without `--runner`, no or both of
            `--output_file` and `--output_dir`, a WordPiece flag with
            `--tokenizer=bpe`, or what `build_vocab` / `build_bpe_tokenizer` refuse.
        FileNotFoundError: a missing input.
    """
    if pipeline_args and not FLAGS.runner:
        raise ValueError(f"unknown flag(s) {' '.join(pipeline_args)}; "
                         "Apache Beam options need --runner.")
    if not FLAGS.input_file:
        raise ValueError("kbert-vocab build needs --input_file.")
    if bool(FLAGS.output_file) == bool(FLAGS.output_dir):
        raise ValueError("kbert-vocab build needs one of --output_file (the file) and "
                         "--output_dir (a directory to write it into).")
    bpe = FLAGS.tokenizer == "bpe"
    given = [f"--{name}" for name in WORDPIECE_FLAGS if FLAGS[name].present]
    if bpe and given:
        raise ValueError(f"{', '.join(given)} shape(s) a WordPiece vocab.txt; a byte-level BPE "
                         "is cased, has every byte and pads with [unusedN] to a multiple of 64 "
                         "ids: drop them or pass --tokenizer=wordpiece.")
    from kbert.bin import common  # noqa: F401  Starts TensorFlow without its start-up notices.
    from kbert.data import vocab

    output_file = FLAGS.output_file or os.path.join(
        FLAGS.output_dir, "tokenizer.json" if bpe else "vocab.txt")
    if FLAGS.output_dir:
        _make_directory(FLAGS.output_dir)
    vocab_size = FLAGS.vocab_size or DEFAULT_VOCAB_SIZES[FLAGS.tokenizer]
    start = time.time()
    common_args = dict(vocab_size=vocab_size, input_encoding=FLAGS.input_encoding,
                       min_frequency=FLAGS.min_frequency, runner=FLAGS.runner,
                       pipeline_args=list(pipeline_args))
    if bpe:
        result = vocab.build_bpe_tokenizer(FLAGS.input_file, output_file, **common_args)
        made = (f" ({result['learned']} learned, {result['special']} special, "
                f"{result['unused']} [unusedN] to a multiple of 64)")
    else:
        result = vocab.build_vocab(FLAGS.input_file, output_file,
                                   do_lower_case=FLAGS.do_lower_case,
                                   num_unused=FLAGS.num_unused,
                                   limit_alphabet=FLAGS.limit_alphabet, **common_args)
        made = ""
        if FLAGS.output_dir:  # A tokenizer directory load_tokenizer reads as it was learned.
            _write_lower_case(FLAGS.output_dir, FLAGS.do_lower_case)
    seconds = time.time() - start
    print(
        f"Wrote {result['vocab_size']} tokens{made} to {output_file} in {seconds:.1f} s "
        f"from {result['input_bytes'] / 1e6:.2f} MB ({result['lines']} lines)."
    )


def _write_lower_case(directory: str, do_lower_case: bool) -> None:
    import json

    from kbert.data.tokenizers import TOKENIZER_CONFIG
    from kbert.files import write_text

    write_text(os.path.join(directory, TOKENIZER_CONFIG),
               json.dumps({"do_lower_case": do_lower_case}) + "\n")


def _make_directory(directory: str) -> None:
    import tensorflow as tf

    try:
        tf.io.gfile.makedirs(directory)
    except (tf.errors.OpError, OSError) as e:
        raise ValueError(f"--output_dir={directory!r} cannot be made: {e}") from None
