"""kbert-vocab: learn a WordPiece or byte-level BPE tokenizer, or grow a pre-trained directory's
WordPiece vocabulary with your domain's words.

    kbert-vocab build --input_file='corpus/*.txt' --output_file=vocab.txt --vocab_size=30522
    kbert-vocab build --tokenizer=bpe --input_file='corpus/*.txt' --vocab_size=32768 \\
        --output_dir=bpe
    kbert-vocab extend --model_dir=minilm --corpus='domain/*.txt' --max_new_tokens=500 \\
        --output_dir=minilm-domain
    kbert-vocab extend --model_dir=minilm --words_file=words.txt --output_dir=minilm-domain

`build` learns a BERT WordPiece `vocab.txt` from raw text (what
`tools/build_vocab.py` runs: the same flags, the same file byte for byte), or,
with `--tokenizer=bpe`, a byte-level BPE `tokenizer.json` laid out as
ModernBERT's (`--output_dir=bpe` writes `bpe/tokenizer.json`); with `--runner`
the corpus is counted by an Apache Beam pipeline, and Beam's own options follow
a `--`:

    kbert-vocab build --input_file='corpus/*.txt' --output_file=vocab.txt \\
        --runner=DirectRunner -- --direct_num_workers=2

`extend` picks the corpus's most frequent words that the vocabulary splits into
several pieces (or takes the words of `--words_file`, one a line), puts them into
the `[unusedN]` slots first and then into appended rows, starts each new row
(and masked-LM output bias) at the mean of its old pieces' rows, and writes a
new pre-trained directory; old tokens keep their ids and rows. Continue
pre-training from it with data made with its `vocab.txt` (see docs/pretraining.md,
"Continue pre-training on your domain").
"""

from __future__ import annotations

from absl import flags

from kbert.bin import common
from kbert.bin import vocab_build

COMMANDS = ("build", "extend")

flags.DEFINE_string("model_dir", None, "The pre-trained directory to extend (kbert-pretrain or "
                    "kbert-convert output with a WordPiece vocab.txt).")
flags.DEFINE_string("corpus", None, "Domain text files (comma-separated names or globs): its "
                    "frequent words split into several pieces are added.")
flags.DEFINE_string("words_file", None, "Instead of --corpus: the words to add, one a line.")
flags.DEFINE_integer("max_new_tokens", None, "At most this many new tokens (required with "
                     "--corpus; with --words_file, more new words than this is an error).")
flags.DEFINE_integer("min_count", 2, "--corpus: occurrences a word needs to be added.")
flags.DEFINE_bool("append_rows", True, "Append embedding rows once the [unusedN] slots are full; "
                  "--noappend_rows keeps the vocabulary size (then more words than free slots "
                  "is an error).")
flags.DEFINE_bool("overwrite", False, "Replace an existing --output_dir.")
FLAGS = flags.FLAGS
# absl's --help lists the main module's own flags; `build`'s are defined with it.
flags.adopt_module_key_flags(vocab_build)


def extend() -> None:
    """Chooses the words, writes the extended directory and prints what was added."""
    from kbert import checkpoints
    from kbert.data.vocab import choose_split_words
    from kbert.data.vocab import count_words
    from kbert.files import check_output_dir

    for name in ("model_dir", "output_dir"):
        if not FLAGS[name].value:
            raise ValueError(f"kbert-vocab extend needs --{name}.")
    if bool(FLAGS.corpus) == bool(FLAGS.words_file):
        raise ValueError("pass exactly one of --corpus (choose the words from a domain corpus) "
                         "and --words_file (a list of words).")
    if FLAGS.max_new_tokens is not None and FLAGS.max_new_tokens < 1:
        raise ValueError(f"--max_new_tokens={FLAGS.max_new_tokens} must be at least 1.")
    if FLAGS.corpus and FLAGS.max_new_tokens is None:
        raise ValueError("--corpus needs --max_new_tokens (e.g. 500).")
    check_output_dir(FLAGS.output_dir, FLAGS.overwrite)
    directory = checkpoints.open_model_dir(FLAGS.model_dir, flag="--model_dir")
    checkpoints.check_extendable(directory)
    counts = None
    if FLAGS.corpus:
        counts = count_words(FLAGS.corpus, directory.tokenizer)
        choice = choose_split_words(counts, FLAGS.max_new_tokens, FLAGS.min_count)
        for line in choice.report():  # How many words passed --min_count; fewer than asked?
            print(line, flush=True)
        words = choice.words
    else:
        words = checkpoints.read_words_file(FLAGS.words_file)
    extension = checkpoints.extend_vocabulary(
        FLAGS.model_dir, words, FLAGS.output_dir, max_new_tokens=FLAGS.max_new_tokens,
        append_rows=FLAGS.append_rows, overwrite=FLAGS.overwrite, counts=counts,
        corpus_files=FLAGS.corpus)
    for note in extension.notes:
        print(f"note: {note}")
    for item in extension.added:
        print(f"  {item['id']:>7d} {item['word']:<24s} <- {' '.join(item['pieces'])} "
              f"({item['slot']})")
    print(f"added {len(extension.added)} tokens ({extension.filled_unused} into [unusedN] slots, "
          f"{extension.appended} appended): vocabulary {extension.vocabulary_size_before} -> "
          f"{extension.vocabulary_size_after}")
    if extension.already_in_vocabulary:
        print(f"already tokens, not added: {' '.join(extension.already_in_vocabulary)}")
    if extension.tokens_per_word_before is not None:
        print(f"tokens per word over --corpus: {extension.tokens_per_word_before:.4f} -> "
              f"{extension.tokens_per_word_after:.4f}")
    print(f"wrote {FLAGS.output_dir}")


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in COMMANDS or (argv[1] == "extend" and len(argv) != 2):
        raise ValueError(f"expected one command, {' | '.join(COMMANDS)}; got {argv[1:]}.")
    if argv[1] == "build":
        vocab_build.build(pipeline_args=argv[2:])  # what follows `--`: Beam's options
    else:
        extend()


def run() -> None:
    common.run(main)


if __name__ == "__main__":
    run()
