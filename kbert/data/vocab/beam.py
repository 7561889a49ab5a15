"""The counting of `build_vocab` and `build_bpe_tokenizer` as an Apache Beam pipeline.

`build_vocab(..., runner="DirectRunner")` (the tool's `--runner`) counts the
corpus with Beam, so that the pass over the text, the expensive part, runs on
many workers (DirectRunner here; Dataflow, Flink or Spark at scale), and then
learns the vocabulary on the launching machine from the counts
(`learning.learn_vocab`; `bpe_learning.learn_bpe` for a byte-level BPE). The
counts are those the local tool's trainer makes, so the `vocab.txt` (or
`tokenizer.json`) is the same, byte for byte.

The steps:

1. **Count blocks** (blocks spread over the workers): every file is split into
   byte ranges of `BLOCK_BYTES`, and a worker reads the whole lines that start
   in its range (`text_files.read_line_range`, through `tf.io.gfile`, so
   `gs://` works): one file is read by many workers at once. Each block is
   decoded with `--input_encoding` (an error names the file and line),
   counted by raw character (`count_characters`, for the WordPiece alphabet;
   a byte-level BPE's is every byte) and by word (`learning.count_words`:
   BERT normalization of many lines in one call, then `BertPreTokenizer`, as
   the trainer does; `bpe_learning.count_words`: NFC, then the byte-level
   pre-tokenizer), with the local tool's line handling (lines split at
   `\\n`, cut to `MAX_LINE_CHARS`, stripped).
2. **Sum counts**: a combine per word (and per character), so no worker holds
   all the words; Beam sums within each worker before the shuffle.
3. **Write counts**: `WriteToText` into a work directory beside the output
   (`<output>.<run>.incomplete/`), as `kind<TAB>key<TAB>count` lines.

Then the launching process reads the counts (characters first, then streams
the words into the trainer) and writes `vocab.txt` (`learn_vocab`); it
removes the work directory at the end, also when the run fails.
"""

from __future__ import annotations

import collections
import os
import uuid
from collections.abc import Iterator
from typing import Any, Sequence

import apache_beam as beam
import tensorflow as tf

from kbert.data import beam_support
from kbert.data import text_files
from kbert.data.vocab import bpe_learning
from kbert.data.vocab.learning import bert_normalizer
from kbert.data.vocab.learning import count_characters
from kbert.data.vocab.learning import count_words
from kbert.data.vocab.learning import learn_vocab

# Text per counting element: many per file, so a large file is counted by many
# workers; each holds one block's text and its words at a time.
BLOCK_BYTES = 1 << 24
_CHAR, _WORD, _LINES = "c", "w", "l"


def count_and_learn(
    files: Sequence[str],
    output_file: str,
    input_encoding: str,
    runner: str,
    pipeline_args: Sequence[str],
    block_bytes: int | None = None,
    tokenizer: str = "wordpiece",
    **settings: Any,
) -> dict[str, Any]:
    """Counts `files` with a Beam pipeline, then learns and writes the vocabulary here.

    Called by `build_vocab(..., runner=...)` and `build_bpe_tokenizer(..., runner=...)`,
    which check the arguments.

    Args:
        files: list of str. The corpus.
        output_file: str. Where `vocab.txt` goes.
        input_encoding: str. Codec of the files.
        runner: str. Beam runner name.
        pipeline_args: list of str. Beam's own options.
        block_bytes: int or None. Text per counting element. Defaults to
            `BLOCK_BYTES` (16 MiB).
        tokenizer: str. `"wordpiece"` (a `vocab.txt`, `learning.learn_vocab`)
            or `"bpe"` (a `tokenizer.json`, `bpe_learning.learn_bpe`).
            Defaults to "wordpiece".
        **settings: `vocab_size`, `do_lower_case`, `num_unused`,
            `min_frequency`, `limit_alphabet` for `learn_vocab`;
            `vocab_size`, `min_frequency` for `learn_bpe`.

    Returns:
        A dict with `vocab_size` (written) and `lines` (non-blank lines); for
        a byte-level BPE also `learned`, `special` and `unused`.

    Raises:
        ValueError: undecodable text (naming file and line), an empty
            corpus, or a failed run. No output is left behind then.

    Example:

    >>> kbert.data.build_vocab("corpus/*.txt", "vocab.txt", runner="DirectRunner")
    """
    options = beam_support.pipeline_options(runner, pipeline_args)
    work_dir = f"{output_file}.{uuid.uuid4().hex[:8]}.incomplete"
    try:
        tf.io.gfile.makedirs(work_dir)
        pipeline = beam.Pipeline(options=options)
        counts_prefix = os.path.join(work_dir, "counts")
        _ = (
            pipeline
            | "List blocks" >> beam.Create(list(_blocks(files, block_bytes or BLOCK_BYTES)))
            | "Spread blocks" >> beam.Reshuffle()
            | "Count blocks" >> beam.ParDo(
                _CountBlock(input_encoding, tokenizer, settings.get("do_lower_case", False)))
            | "Sum counts" >> beam.CombinePerKey(sum)
            | "Format counts" >> beam.MapTuple(_count_line)
            | "Write counts" >> beam.io.WriteToText(counts_prefix, file_name_suffix=".tsv")
        )
        beam_support.run_pipeline(pipeline, f"the word counts of {output_file}")
        count_files = sorted(tf.io.gfile.glob(counts_prefix + "*.tsv"))
        char_counts, num_lines = _read_char_counts(count_files)
        if tokenizer == "bpe":
            result = bpe_learning.learn_bpe(_read_word_counts(count_files), output_file,
                                            lines=num_lines, **settings)
        else:
            result = {"vocab_size": learn_vocab(_read_word_counts(count_files), char_counts,
                                                output_file, **settings), "lines": num_lines}
    finally:
        if tf.io.gfile.exists(work_dir):
            tf.io.gfile.rmtree(work_dir)
    return result


def _blocks(files: Sequence[str], block_bytes: int) -> Iterator[tuple[str, int, int]]:
    """`(path, start, end)` byte ranges covering every file."""
    for path in files:
        size = tf.io.gfile.stat(path).length
        for start in range(0, size, block_bytes):
            yield path, start, min(start + block_bytes, size)


class _CountBlock(beam.DoFn):
    """(path, start, end) -> ((kind, key), count) for the characters, words and lines of the block.

    Characters only for WordPiece (its alphabet); a byte-level BPE's is every byte.
    """

    def __init__(self, encoding: str, tokenizer: str, do_lower_case: bool):
        self.encoding = encoding
        self.tokenizer = tokenizer
        self.do_lower_case = do_lower_case

    def process(self, element: tuple[str, int, int]) -> Iterator[tuple[tuple[str, str], int]]:
        piece = text_files.read_line_range(*element)
        if piece is None:
            return
        data = text_files.decode_piece(piece, piece.data, self.encoding)  # Fails naming file:line.
        if self.tokenizer != "bpe":
            for char, count in count_characters(data).items():
                yield (_CHAR, char), count
        # The local tool's lines (`text_files.iter_lines`): split at b"\n", cut, stripped.
        lines = [line[: text_files.MAX_LINE_CHARS].strip() for line in data.decode("utf-8").split("\n")]
        lines = [line for line in lines if line]
        yield (_LINES, ""), len(lines)
        words = (bpe_learning.count_words(lines) if self.tokenizer == "bpe"
                 else count_words(lines, bert_normalizer(self.do_lower_case)))
        for word, count in words.items():
            yield (_WORD, word), count


def _count_line(key: tuple[str, str], count: int) -> str:
    kind, value = key
    # Characters by code point: a raw character may be a tab or a line end.
    return f"{kind}\t{ord(value) if kind == _CHAR else value}\t{count}"


def _read_lines(count_files: Sequence[str]) -> Iterator[list[str]]:
    for path in count_files:
        with tf.io.gfile.GFile(path, "r") as f:
            for line in f:
                yield line.rstrip("\n").split("\t")


def _read_char_counts(count_files: Sequence[str]) -> tuple[collections.Counter[str], int]:
    chars: collections.Counter[str] = collections.Counter()
    num_lines = 0
    for kind, value, count in _read_lines(count_files):
        if kind == _CHAR:
            chars[chr(int(value))] += int(count)
        elif kind == _LINES:
            num_lines += int(count)
    return chars, num_lines


def _read_word_counts(count_files: Sequence[str]) -> Iterator[tuple[str, int]]:
    for kind, value, count in _read_lines(count_files):
        if kind == _WORD:
            yield value, int(count)
