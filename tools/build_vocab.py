"""Learns a BERT WordPiece vocabulary (`vocab.txt`), or a byte-level BPE `tokenizer.json`, from raw text.

The layout follows the released BERT vocabularies: `[PAD]` (id 0),
`[unused0]`..`[unused{N-1}]`, `[UNK]`, `[CLS]`, `[SEP]`, `[MASK]`, every character
and its `##` form, then learned tokens (`##` marks continuations). Both
tensorflow-text's `FastBertTokenizer` and google-research/bert's `FullTokenizer`
read it. The same input and flags give the same file, byte for byte. With
--runner the corpus is counted by an Apache Beam pipeline (DirectRunner here;
Dataflow, Flink or Spark at scale) and the vocabulary learned from the counts
on this machine: the same file. Options after the tool's flags go to Beam.
With --tokenizer=bpe it writes a byte-level BPE `tokenizer.json` laid out as
ModernBERT's instead (see `kbert.data.vocab.bpe_learning`). The same as
`kbert-vocab build` (both run `kbert.bin.vocab_build`).

Example:

    python tools/build_vocab.py --input_file='corpus/*.txt' --output_file=vocab.txt

    python tools/build_vocab.py --tokenizer=bpe --input_file='corpus/*.txt' \
      --vocab_size=32768 --output_dir=bpe

    python tools/build_vocab.py --input_file='corpus/*.txt' --output_file=vocab.txt \
      --runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_processing
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import sys  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

from kbert.bin import vocab_build  # noqa: E402

FLAGS = flags.FLAGS
# The flags are vocab_build's; absl's --help lists the main module's own.
flags.adopt_module_key_flags(vocab_build)


def main(argv):
    try:
        vocab_build.build(pipeline_args=argv[1:])
    except (ValueError, FileNotFoundError) as e:
        sys.exit(f"build_vocab: error: {e}")


def parse_flags(argv):
    """Parses this tool's flags; the rest of the command line is Apache Beam's (with --runner)."""
    return FLAGS(argv, known_only=True)


if __name__ == "__main__":
    flags.mark_flags_as_required(["input_file"])
    app.run(main, flags_parser=parse_flags)
