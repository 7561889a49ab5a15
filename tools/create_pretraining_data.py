"""Creates masked-LM/next-sentence pre-training TFRecords from raw text.

Same flags, defaults, algorithm and output format as google-research/bert's
`create_pretraining_data.py`, plus n-gram masking, SOP/none sentence tasks,
byte-level BPE tokenizers (--tokenizer_file=tokenizer.json, ModernBERT's kind,
e.g. from kbert-vocab build --tokenizer=bpe) and worker processes; streams with
bounded memory and gives byte-identical output for any --num_workers. With --runner it runs as an Apache Beam pipeline instead
(DirectRunner here; Dataflow, Flink or Spark for corpora past one machine) and
writes the same files; options after the tool's flags go to Beam. See
docs/data.md.

Example:

    python tools/create_pretraining_data.py \
      --input_file='corpus/*.txt' \
      --output_file=data/train-0.tfrecord,data/train-1.tfrecord \
      --vocab_file=vocab.txt --dupe_factor=5

    python tools/create_pretraining_data.py \
      --input_file='corpus/*.txt' --output_file=data/train.tfrecord \
      --tokenizer_file=bpe/tokenizer.json --next_sentence=none --masking=dynamic \
      --dupe_factor=1

    python tools/create_pretraining_data.py ... --runner=DirectRunner \
      --direct_num_workers=2 --direct_running_mode=multi_processing
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("input_file", None, "Input raw text file(s): comma-separated names or globs.")
flags.DEFINE_string(
    "output_file", None, "Output TFRecord file(s), comma-separated; instances go round-robin."
)
flags.DEFINE_string("vocab_file", None, "The WordPiece vocabulary the BERT model is trained on.")
flags.DEFINE_string(
    "tokenizer_file", None, "Instead of --vocab_file: the tokenizer the model is trained on, a "
    "byte-level BPE tokenizer.json (ModernBERT's kind; kbert-vocab build --tokenizer=bpe) or a "
    "vocab.txt. Each line is stripped and tokenized on its own.")
flags.DEFINE_bool(
    "do_lower_case", True, "Lower case and strip accents: True for uncased models, False for "
    "cased (WordPiece only: a byte-level BPE has no lower casing)."
)
flags.DEFINE_bool("do_whole_word_mask", False, "Mask all pieces of a word together (WordPiece: "
                  "a piece and its ## pieces; byte-level BPE: a piece with a leading space and "
                  "the pieces after it without one).")
flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length in tokens.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum masked LM predictions per sequence.")
flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
flags.DEFINE_integer("dupe_factor", 10, "Passes over the input, each with different masks.")
flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
flags.DEFINE_float(
    "short_seq_prob", 0.1, "Probability of aiming for a sequence shorter than the maximum length."
)
flags.DEFINE_integer(
    "max_ngram_size", 1, "Mask spans of up to this many words (ALBERT n-gram masking); 1 is off."
)
flags.DEFINE_enum(
    "next_sentence", "nsp", ["nsp", "sop", "none"],
    "Sentence task: nsp (random next, BERT), sop (swapped order, ALBERT) or none "
    "(single segments, no next_sentence_labels feature, RoBERTa).",
)
flags.DEFINE_enum(
    "masking", "static", ["static", "dynamic"],
    "static: mask here, once per dupe (masked_lm_* features, google-research/bert); dynamic: "
    "write unmasked instances that kbert-pretrain masks anew for every batch "
    "(run_pretraining.masking = \"dynamic\"; RoBERTa). Use --dupe_factor=1 with dynamic.",
)
flags.DEFINE_integer(
    "num_workers", None, "Worker processes (default: all cores). Does not change the output."
)
flags.DEFINE_string("input_encoding", "utf-8", "Encoding of the input files, e.g. latin-1.")
flags.DEFINE_integer(
    "chunk_bytes", 1 << 20,
    "Text per work unit; bounds memory and the pool random next sentences come from. "
    "Changes the output.",
)
flags.DEFINE_bool("verbose", False, "Print the first 20 instances in readable form.")
flags.DEFINE_string(
    "runner", None,
    "Run as an Apache Beam pipeline on this runner (DirectRunner, DataflowRunner, FlinkRunner, "
    "SparkRunner; needs the beam extra: pip install -e '.[beam]'); other options on the command "
    "line go to Beam. Default: this machine's cores (--num_workers). Does not change the output.",
)


def main(argv):
    pipeline_args = argv[1:]
    if pipeline_args and not FLAGS.runner:
        sys.exit(
            f"create_pretraining_data: error: unknown flag(s) {' '.join(pipeline_args)}; "
            "Apache Beam options need --runner."
        )
    from kbert.bin import common  # noqa: F401  Starts TensorFlow without its start-up notices.
    from kbert.data import format_instance
    from kbert.data.pretraining.generator import create_pretraining_data
    from kbert.data.tokenizers import ByteLevelBpeTokenizer
    from kbert.data.tokenizers import tokenizer_class

    tokenizer_path = FLAGS.tokenizer_file or FLAGS.vocab_file
    if not tokenizer_path:
        sys.exit("create_pretraining_data: error: pass --vocab_file (a WordPiece vocab.txt) or "
                 "--tokenizer_file (a byte-level BPE tokenizer.json or a vocab.txt).")
    kind = tokenizer_class(tokenizer_path)
    if kind is ByteLevelBpeTokenizer and FLAGS["do_lower_case"].present:
        sys.exit(f"create_pretraining_data: error: --do_lower_case applies to WordPiece; "
                 f"{tokenizer_path} is a byte-level BPE, which has no lower casing: drop it.")
    vocab = None
    if FLAGS.verbose:
        try:
            vocab = kind.read_vocabulary(tokenizer_path)
        except (ValueError, FileNotFoundError) as e:
            sys.exit(f"create_pretraining_data: error: {e}")
    start = time.time()
    last_report = [start]

    def progress(state):
        now = time.time()
        if now - last_report[0] >= 5:
            last_report[0] = now
            logging.info(
                "dupe %d chunk %d: %d instances, %d documents, %.0f s",
                state["dupe"] + 1, state["chunk"] + 1, state["instances"],
                state["documents"], state["seconds"],
            )

    def show(instance):
        print("*** Example ***\n" + format_instance(instance, vocab) + "\n", flush=True)

    flag_values = {f.name: f.value for f in FLAGS.get_key_flags_for_module(sys.argv[0])}
    try:
        metadata = create_pretraining_data(
            input_file=FLAGS.input_file,
            output_file=FLAGS.output_file,
            vocab_file=FLAGS.vocab_file,
            tokenizer_file=FLAGS.tokenizer_file,
            do_lower_case=FLAGS.do_lower_case,
            do_whole_word_mask=FLAGS.do_whole_word_mask,
            max_seq_length=FLAGS.max_seq_length,
            max_predictions_per_seq=FLAGS.max_predictions_per_seq,
            random_seed=FLAGS.random_seed,
            dupe_factor=FLAGS.dupe_factor,
            masked_lm_prob=FLAGS.masked_lm_prob,
            short_seq_prob=FLAGS.short_seq_prob,
            max_ngram_size=FLAGS.max_ngram_size,
            next_sentence=FLAGS.next_sentence,
            masking=FLAGS.masking,
            num_workers=FLAGS.num_workers,
            input_encoding=FLAGS.input_encoding,
            chunk_bytes=FLAGS.chunk_bytes,
            flags=flag_values,
            num_verbose_examples=20 if FLAGS.verbose else 0,
            example_callback=show if FLAGS.verbose else None,
            progress_callback=progress,
            runner=FLAGS.runner,
            pipeline_args=pipeline_args,
        )
    except (ValueError, FileNotFoundError) as e:
        sys.exit(f"create_pretraining_data: error: {e}")
    counts = metadata["counts"]
    print(
        f"Wrote {counts['instances']} instances to {len(metadata['output_files'])} file(s) "
        f"(+ .meta.json sidecars) in {metadata['seconds']:.1f} s: "
        f"{counts['input_bytes'] / 1e6:.2f} MB input at {metadata['input_mb_per_s']:.2f} MB/s"
    )
    print(json.dumps(counts, indent=2))


def parse_flags(argv):
    """Parses this tool's flags; the rest of the command line is Apache Beam's (with --runner)."""
    return FLAGS(argv, known_only=True)


if __name__ == "__main__":
    flags.mark_flags_as_required(["input_file", "output_file"])
    app.run(main, flags_parser=parse_flags)
