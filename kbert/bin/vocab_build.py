"""`kbert-vocab build` and `tools/build_vocab.py`: learn a BERT WordPiece `vocab.txt` from raw text.

The flags and the run of both front doors, defined once. The layout follows
the released BERT vocabularies: `[PAD]` (id 0), `[unused0]`..`[unused{N-1}]`,
`[UNK]`, `[CLS]`, `[SEP]`, `[MASK]`, every character and its `##` form, then
learned tokens (`##` marks continuations). Both tensorflow-text's
`FastBertTokenizer` and google-research/bert's `FullTokenizer` read it. The
same input and flags give the same file, byte for byte. With --runner the
corpus is counted by an Apache Beam pipeline (DirectRunner here; Dataflow,
Flink or Spark at scale) and the vocabulary learned from the counts on this
machine: the same file; Beam's own options follow the tool's flags.

Only absl is imported here, so `--help` starts no TensorFlow; `build` imports
the library (`kbert.data.vocab.build_vocab`).
"""

from __future__ import annotations

import time
from typing import Sequence

from absl import flags

flags.DEFINE_string("input_file", None, "Raw text file(s): comma-separated names or globs.")
flags.DEFINE_string("output_file", None, "Where to write vocab.txt.")
flags.DEFINE_integer("vocab_size", 30522, "Vocabulary size including reserved tokens.")
flags.DEFINE_bool(
    "do_lower_case", True, "Lower case and strip accents: True for uncased models, False for cased."
)
flags.DEFINE_integer(
    "num_unused", 99, "[unusedN] placeholders after [PAD]; 99 gives bert-base's special ids."
)
flags.DEFINE_string("input_encoding", "utf-8", "Encoding of the input files, e.g. latin-1.")
flags.DEFINE_integer("min_frequency", 2, "Least count of a pair to merge.")
flags.DEFINE_integer(
    "limit_alphabet", 1000, "Most distinct characters kept (the most frequent); others become [UNK]."
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
    """Learns the vocabulary the flags describe, writes it and prints one line.

    Args:
        pipeline_args: list of str. Apache Beam's own options (with `--runner`).

    Raises:
        ValueError: Beam options without `--runner`, or what `build_vocab` refuses.
        FileNotFoundError: a missing input.
    """
    if pipeline_args and not FLAGS.runner:
        raise ValueError(f"unknown flag(s) {' '.join(pipeline_args)}; "
                         "Apache Beam options need --runner.")
    from kbert.bin import common  # noqa: F401  Starts TensorFlow without its start-up notices.
    from kbert.data.vocab import build_vocab

    start = time.time()
    result = build_vocab(
        FLAGS.input_file,
        FLAGS.output_file,
        vocab_size=FLAGS.vocab_size,
        do_lower_case=FLAGS.do_lower_case,
        num_unused=FLAGS.num_unused,
        input_encoding=FLAGS.input_encoding,
        min_frequency=FLAGS.min_frequency,
        limit_alphabet=FLAGS.limit_alphabet,
        runner=FLAGS.runner,
        pipeline_args=list(pipeline_args),
    )
    seconds = time.time() - start
    print(
        f"Wrote {result['vocab_size']} tokens to {FLAGS.output_file} in {seconds:.1f} s "
        f"from {result['input_bytes'] / 1e6:.2f} MB ({result['lines']} lines)."
    )
