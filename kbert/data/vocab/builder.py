"""`build_vocab` and `build_bpe_tokenizer`: a tokenizer learned from raw text.

The front doors: they check the arguments and choose where the corpus is read.
Without `runner`, on this machine (`learning.learn_vocab_from_files`,
`bpe_learning.learn_bpe_from_files`); with an Apache Beam runner's name, the
corpus is counted by a Beam pipeline (`kbert.data.vocab.beam`, imported only
then, as it imports Apache Beam) and the tokenizer is learned from the counts
here (`learning.learn_vocab`, `bpe_learning.learn_bpe`). Both give the same
file, byte for byte; the layouts and why they are deterministic are described
in `kbert.data.vocab.learning` (WordPiece `vocab.txt`, BERT's) and
`kbert.data.vocab.bpe_learning` (byte-level BPE `tokenizer.json`, ModernBERT's).
"""

from __future__ import annotations

from typing import Any, Sequence

import tensorflow as tf

from kbert.data import beam_support
from kbert.data import text_files
from kbert.data.vocab import bpe_learning
from kbert.data.vocab.learning import learn_vocab_from_files
from kbert.data.vocab.learning import reserved_tokens


def build_vocab(
    input_file: str | Sequence[str],
    output_file: str,
    vocab_size: int = 30522,
    do_lower_case: bool = True,
    num_unused: int = 99,
    input_encoding: str = "utf-8",
    min_frequency: int = 2,
    limit_alphabet: int = 1000,
    runner: str | None = None,
    pipeline_args: Sequence[str] = (),
) -> dict[str, Any]:
    """Learns a WordPiece vocabulary and writes it as `vocab.txt`.

    Args:
        input_file: str or list of str. Comma-separated file names or globs
            of raw text.
        output_file: str. Where to write `vocab.txt` (atomically: `kbert.files.write_text`).
        vocab_size: int. Size of the vocabulary including reserved tokens.
            A small corpus may give fewer. Defaults to 30522.
        do_lower_case: bool. Lower case and strip accents, as for uncased
            models. Defaults to True.
        num_unused: int. `[unusedN]` placeholders after `[PAD]`. Defaults to 99.
        input_encoding: str. Codec of the input. Defaults to "utf-8".
        min_frequency: int. Least count of a merged pair. Defaults to 2.
        limit_alphabet: int. Most distinct characters kept (the most frequent;
            ties go to the lower code point). Defaults to 1000.
        runner: str or None. None reads the corpus here; an Apache Beam
            runner's name (`"DirectRunner"`, `"DataflowRunner"`, ...) counts
            it with a Beam pipeline (`kbert.data.vocab.beam`, needs the `beam`
            extra: `pip install -e '.[beam]'`) and learns from the counts here: the
            same `vocab.txt`. Defaults to None.
        pipeline_args: list of str. Beam's own pipeline options with `runner`.

    Returns:
        A dict with `vocab_size` (written), `input_files`, `input_bytes`,
        `lines` (non-blank lines read).

    Raises:
        ValueError: for missing input, undecodable text (naming file and
            line), an empty corpus, a `vocab_size` too small for the reserved
            tokens and the alphabet, or an output directory that does not
            exist.

    Example:

    >>> kbert.data.build_vocab("corpus/*.txt", "vocab.txt", vocab_size=8000)
    """
    if num_unused < 0:
        raise ValueError(f"--num_unused={num_unused} must be non-negative.")
    reserved = reserved_tokens(num_unused)
    if vocab_size <= len(reserved):
        raise ValueError(
            f"--vocab_size={vocab_size} leaves no room after {len(reserved)} reserved tokens."
        )
    files = text_files.expand_file_patterns(input_file, "input_file")
    _check_output_file(output_file, "vocab.txt")
    settings = dict(vocab_size=vocab_size, do_lower_case=do_lower_case, num_unused=num_unused,
                    min_frequency=min_frequency, limit_alphabet=limit_alphabet)
    if runner:
        beam_support.check_beam_installed(runner)
        from kbert.data.vocab import beam  # Imports apache_beam.

        result = beam.count_and_learn(
            files, output_file, input_encoding, runner, pipeline_args, **settings
        )
    else:
        result = learn_vocab_from_files(files, output_file, input_encoding, **settings)
    return {**result, "input_files": files, "input_bytes": _size(files)}


def build_bpe_tokenizer(
    input_file: str | Sequence[str],
    output_file: str,
    vocab_size: int = 50368,
    input_encoding: str = "utf-8",
    min_frequency: int = 2,
    runner: str | None = None,
    pipeline_args: Sequence[str] = (),
) -> dict[str, Any]:
    """Learns a byte-level BPE tokenizer laid out as ModernBERT's and writes its `tokenizer.json`.

    NFC, GPT-2's byte-level pre-tokenization, the learned merges, then
    `[UNK]`, `[CLS]`, `[SEP]`, `[PAD]`, `[MASK]` and `[unusedN]` tokens up to a
    multiple of 64 ids (see `kbert.data.vocab.bpe_learning`). The same input
    and arguments give the same file, byte for byte, with or without `runner`.

    Args:
        input_file: str or list of str. Comma-separated file names or globs
            of raw text.
        output_file: str. Where to write the `tokenizer.json` (atomically);
            its name must end in `.json`, which is how kbert tells a
            byte-level BPE file from a `vocab.txt`.
        vocab_size: int. Ids, rounded up to a multiple of 64 (as ModernBERT
            pads its vocabulary); all but the 5 special tokens are learned.
            A small corpus gives fewer merges: then `[unusedN]` tokens pad
            what was learned to the next multiple of 64.
            Defaults to 50368 (ModernBERT's).
        input_encoding: str. Codec of the input. Defaults to "utf-8".
        min_frequency: int. Least count of a merged pair. Defaults to 2.
        runner: str or None. As for `build_vocab`: an Apache Beam runner
            counts the words, the tokenizer is learned from the counts here.
        pipeline_args: list of str. Beam's own pipeline options with `runner`.

    Returns:
        A dict with `vocab_size` (ids written), `learned`, `special`,
        `unused`, `lines`, `input_files` and `input_bytes`.

    Raises:
        ValueError: for missing input, undecodable text (naming file and
            line), an empty corpus, a `vocab_size` below 262, an output name
            not ending in `.json`, or an output directory that does not exist.

    Example:

    >>> kbert.data.vocab.build_bpe_tokenizer("corpus/*.txt", "bpe/tokenizer.json",
    ...                                      vocab_size=32768)
    {'vocab_size': 32768, 'learned': 32763, 'special': 5, 'unused': 0, ...}
    """
    bpe_learning.check_vocab_size(vocab_size)
    files = text_files.expand_file_patterns(input_file, "input_file")
    _check_output_file(output_file, "tokenizer.json")
    if not output_file.endswith(".json"):
        raise ValueError(f"--output_file={output_file!r}: a byte-level BPE tokenizer is a .json "
                         "file (kbert tells the kind by the extension); name it tokenizer.json.")
    settings = dict(vocab_size=vocab_size, min_frequency=min_frequency)
    if runner:
        beam_support.check_beam_installed(runner)
        from kbert.data.vocab import beam  # Imports apache_beam.

        result = beam.count_and_learn(files, output_file, input_encoding, runner, pipeline_args,
                                      tokenizer="bpe", **settings)
    else:
        result = bpe_learning.learn_bpe_from_files(files, output_file, input_encoding, **settings)
    return {**result, "input_files": files, "input_bytes": _size(files)}


def _check_output_file(output_file: str, example_name: str) -> None:
    if tf.io.gfile.isdir(output_file):
        raise ValueError(f"--output_file={output_file!r} is a directory; name a file in it, "
                         f"such as {output_file.rstrip('/')}/{example_name}.")
    directory = output_file.rsplit("/", 1)[0] if "/" in output_file else ""
    if directory and not tf.io.gfile.isdir(directory):
        raise ValueError(
            f"--output_file={output_file!r}: directory {directory!r} does not exist; create it first."
        )


def _size(files: Sequence[str]) -> int:
    return sum(tf.io.gfile.stat(f).length for f in files)
