"""`create_pretraining_data`: raw text to pre-training TFRecords, in parallel.

The front door: it checks the arguments into a `GenerationConfig`
(`_check_settings`, `_output_files`, `_tokenizer_file`) and hands it to a runner:

- `local_runner.run_generation` (the default): the (dupe, chunk) tasks in
  this process or a process pool, streamed, with the tokens of later dupes
  cached on disk; the output does not depend on `num_workers`.
- `beam_pipeline.run_generation` (`runner=...`, imported only then, as it
  imports Apache Beam): the same tasks as a Beam pipeline, on many machines.

Both run the same per-chunk work (`ChunkProcessor`, `chunk_processor.py`) and
write and publish the same files (`outputs.py`), byte for byte.

Differences from google-research/bert's tool in the data itself:

- Bounded pools. Random-next segments are drawn and instances shuffled
  within a chunk, where the original does both over the whole corpus (its
  document shuffle only orders instances that it shuffles anyway). A random next sentence therefore comes from the same chunk
  (~`chunk_bytes` of text, many documents for typical corpora; if a chunk
  holds a single document, from that document, as the original also does
  when it finds no other). The TFRecord reader's shuffle buffer mixes
  further. A document longer than `chunk_bytes` is split where a chunk ends.
- Every file boundary ends a document; lines longer than
  `text_files.MAX_LINE_CHARS` characters are cut.
- Outputs are written to `<output>.incomplete` and renamed when complete;
  on any error the temporary files are removed. A JSON sidecar
  `<output>.meta.json` is written next to each output (see
  `pretraining_metadata`).
"""

from __future__ import annotations

import codecs
import os
import posixpath
import time
from collections.abc import Callable
from typing import Any, Sequence

import tensorflow as tf

from kbert.data import beam_support
from kbert.data import text_files
from kbert.data.pretraining import local_runner
from kbert.data.pretraining.chunk_processor import DEFAULT_CHUNK_BYTES
from kbert.data.pretraining.chunk_processor import GenerationConfig
from kbert.data.pretraining.instances import InstanceOptions
from kbert.data.pretraining.instances import TrainingInstance
from kbert.data.pretraining.instances import VocabInfo


def _default_flags(config: GenerationConfig, input_file: str | Sequence[str],
                   vocab_file: str | None, tokenizer_file: str | None) -> dict[str, Any]:
    """The flags a sidecar records when the caller passes none: the arguments as given."""
    options = config.options
    return {
        "input_file": input_file if isinstance(input_file, str) else ",".join(input_file),
        "output_file": ",".join(config.output_files),
        "vocab_file": vocab_file,
        "tokenizer_file": tokenizer_file,
        "do_lower_case": config.do_lower_case,
        "do_whole_word_mask": options.do_whole_word_mask,
        "max_seq_length": options.max_seq_length,
        "max_predictions_per_seq": options.max_predictions_per_seq,
        "random_seed": config.random_seed,
        "dupe_factor": config.dupe_factor,
        "masked_lm_prob": options.masked_lm_prob,
        "short_seq_prob": options.short_seq_prob,
        "max_ngram_size": options.max_ngram_size,
        "next_sentence": options.next_sentence,
        "masking": options.masking,
        "input_encoding": config.input_encoding,
    }


def _check_settings(
    options: InstanceOptions, dupe_factor: int, chunk_bytes: int, input_encoding: str,
    num_workers: int | None,
) -> int:
    """Raises ValueError for an impossible setting; returns the number of workers to start."""
    options.validate()
    if dupe_factor < 1:
        raise ValueError(f"--dupe_factor={dupe_factor} must be at least 1.")
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes={chunk_bytes} must be positive.")
    try:
        codecs.lookup(input_encoding)
    except LookupError:
        raise ValueError(f"--input_encoding={input_encoding!r} is not a known codec.") from None
    num_workers = num_workers or os.cpu_count() or 1
    if num_workers < 1:
        raise ValueError(f"--num_workers={num_workers} must be at least 1.")
    return num_workers


def _output_files(output_file: str | Sequence[str]) -> list[str]:
    """The output files named by `--output_file`, checked (see `_check_outputs`)."""
    if isinstance(output_file, str):
        output_files = [f.strip() for f in output_file.split(",") if f.strip()]
    else:
        output_files = list(output_file)
    _check_outputs(output_files)
    return output_files


def _check_outputs(output_files: Sequence[str]) -> None:
    if not output_files:
        raise ValueError("--output_file is empty; pass a file name or comma-separated list.")
    if len(set(output_files)) != len(output_files):
        raise ValueError(f"--output_file lists a file twice: {list(output_files)}.")
    for output_file in output_files:
        if tf.io.gfile.isdir(output_file):
            raise ValueError(
                f"--output_file={output_file!r} is a directory; name a file in it, such as "
                f"{posixpath.join(output_file, 'train-0.tfrecord')!r}."
            )
        directory = posixpath.dirname(output_file) if "://" in output_file else os.path.dirname(output_file)
        if directory and not tf.io.gfile.isdir(directory):
            raise ValueError(
                f"--output_file={output_file!r}: directory {directory!r} does not exist; create it first."
            )


def _tokenizer_file(vocab_file: str | None, tokenizer_file: str | None) -> tuple[str, int]:
    """The one tokenizer file of `--vocab_file` / `--tokenizer_file`, checked, and its size."""
    if bool(vocab_file) == bool(tokenizer_file):
        raise ValueError("pass one of --vocab_file (a WordPiece vocab.txt) and --tokenizer_file "
                         "(a vocab.txt or a byte-level BPE tokenizer.json, e.g. from kbert-vocab "
                         "build --tokenizer=bpe)" + ("; got both." if vocab_file else "."))
    path = tokenizer_file or vocab_file
    return path, VocabInfo.from_file(path).vocab_size  # Refuses a file lacking [MASK], ...


def format_instance(instance: TrainingInstance, vocab: Sequence[str]) -> str:
    """Readable form of an instance, like the original's `--verbose` log.

    Args:
        instance: `TrainingInstance`.
        vocab: list of str. Tokens by id.

    Returns:
        Multi-line text: tokens, segment ids, label, masked positions and
        labels.
    """
    label = {None: "none", True: "1 (random/swapped)", False: "0"}[instance.is_random_next]
    return "\n".join(
        [
            "tokens: " + " ".join(vocab[i] for i in instance.token_ids),
            "segment_ids: " + " ".join(str(i) for i in instance.segment_ids),
            f"next_sentence_label: {label}",
            "masked_lm_positions: " + " ".join(str(i) for i in instance.masked_lm_positions),
            "masked_lm_labels: " + " ".join(vocab[i] for i in instance.masked_lm_ids),
        ]
    )


def create_pretraining_data(
    input_file: str | Sequence[str],
    output_file: str | Sequence[str],
    vocab_file: str | None = None,
    do_lower_case: bool = True,
    do_whole_word_mask: bool = False,
    max_seq_length: int = 128,
    max_predictions_per_seq: int = 20,
    random_seed: int = 12345,
    dupe_factor: int = 10,
    masked_lm_prob: float = 0.15,
    short_seq_prob: float = 0.1,
    max_ngram_size: int = 1,
    next_sentence: str = "nsp",
    masking: str = "static",
    num_workers: int | None = None,
    input_encoding: str = "utf-8",
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    flags: dict[str, Any] | None = None,
    num_verbose_examples: int = 0,
    example_callback: Callable[[TrainingInstance], None] | None = None,
    progress_callback: Callable[[dict[str, Any]], None] | None = None,
    runner: str | None = None,
    pipeline_args: Sequence[str] = (),
    tokenizer_file: str | None = None,
) -> dict[str, Any]:
    """Writes masked-LM (+NSP/SOP) pre-training TFRecords from raw text.

    Input: one sentence per line, a blank line between documents (and every
    file ends a document). Output: google-research/bert's features
    (`input_ids`, `input_mask`, `segment_ids`, `masked_lm_positions`,
    `masked_lm_ids`, `masked_lm_weights`, `next_sentence_labels` unless
    `next_sentence="none"`), zero padded, instances round-robin over the
    output files, and a sidecar `<output>.meta.json` next to each.

    Args:
        input_file: str or list of str. Comma-separated file names or globs.
        output_file: str or list of str. Comma-separated output files.
        vocab_file: str or None. WordPiece `vocab.txt` with `[UNK]`, `[CLS]`,
            `[SEP]`, `[MASK]`; or pass `tokenizer_file`.
        do_lower_case: bool. Lower case and strip accents (WordPiece; a
            byte-level BPE has no lower casing and ignores it). Defaults to True.
        do_whole_word_mask: bool. Mask whole words: a piece with the pieces
            that continue it (WordPiece's `##` pieces; a byte-level BPE's
            pieces without a leading space). Defaults to False.
        max_seq_length: int. Defaults to 128.
        max_predictions_per_seq: int. Defaults to 20.
        random_seed: int. Defaults to 12345.
        dupe_factor: int. Passes over the input, each with new masks.
            Defaults to 10.
        masked_lm_prob: float. Defaults to 0.15.
        short_seq_prob: float. Defaults to 0.1.
        max_ngram_size: int. Longest masked span; 1 is off. Defaults to 1.
        next_sentence: str. `"nsp"`, `"sop"` or `"none"`. Defaults to "nsp".
        masking: str. `"static"` writes masked instances (the `masked_lm_*`
            features); `"dynamic"` writes them unmasked, for
            `pretraining_dataset(..., masking="dynamic")` to mask each batch
            anew (`masked_lm_prob`, `do_whole_word_mask` and `max_ngram_size`
            then apply when reading, not here). Defaults to "static".
        num_workers: int or None. Worker processes; None uses all cores, 1
            works in this process. The output does not depend on it.
        input_encoding: str. Codec of the input. Defaults to "utf-8".
        chunk_bytes: int. Text per task; bounds memory and the random-next
            pool. The output depends on it. Defaults to 1 MiB.
        flags: dict or None. Flag values to record in the sidecar.
        num_verbose_examples: int. How many first instances to pass to
            `example_callback`. Defaults to 0.
        example_callback: callable or None. Called with each of the first
            `num_verbose_examples` instances in output order.
        progress_callback: callable or None. Called with the running counts
            after each task (not with `runner`).
        runner: str or None. None runs the tasks here (`num_workers`
            processes); an Apache Beam runner's name (`"DirectRunner"`,
            `"DataflowRunner"`, `"FlinkRunner"`, `"SparkRunner"`) runs them
            as a Beam pipeline (`kbert.data.pretraining.beam_pipeline`, needs the
            `beam` extra: `pip install -e '.[beam]'`): the same records, grouped the same
            way into the same files. Defaults to None.
        pipeline_args: list of str. Beam's own pipeline options with
            `runner`, such as `["--direct_num_workers=2",
            "--direct_running_mode=multi_processing"]`.
        tokenizer_file: str or None. Instead of `vocab_file`: a byte-level BPE
            `tokenizer.json` with `[CLS]`, `[SEP]` and `[MASK]` (from
            `kbert-vocab build --tokenizer=bpe`, ModernBERT's), or a
            `vocab.txt`; its kind by its extension. Each line is stripped and
            tokenized on its own (`kbert.data.tokenization.BpeTokenizer`).

    Returns:
        The metadata dict written to the sidecars (without the per-file keys).

    Raises:
        ValueError: for a bad flag, missing input, undecodable text (naming
            file and line), bad vocabulary, empty corpus or missing output
            directory. No output is left behind then.

    Example:

    >>> kbert.data.create_pretraining_data(
    ...     "corpus/*.txt", "data/train-0.tfrecord,data/train-1.tfrecord",
    ...     "vocab.txt", dupe_factor=5)
    >>> kbert.data.create_pretraining_data(
    ...     "corpus/*.txt", "data/train.tfrecord", tokenizer_file="bpe/tokenizer.json",
    ...     next_sentence="none", masking="dynamic", dupe_factor=1)
    """
    start = time.time()
    options = InstanceOptions(
        max_seq_length=max_seq_length,
        max_predictions_per_seq=max_predictions_per_seq,
        masked_lm_prob=masked_lm_prob,
        short_seq_prob=short_seq_prob,
        next_sentence=next_sentence,
        do_whole_word_mask=do_whole_word_mask,
        max_ngram_size=max_ngram_size,
        masking=masking,
    )
    num_workers = _check_settings(options, dupe_factor, chunk_bytes, input_encoding, num_workers)
    input_files = text_files.expand_file_patterns(input_file, "input_file")
    output_files = _output_files(output_file)
    path, vocab_size = _tokenizer_file(vocab_file, tokenizer_file)
    config = GenerationConfig(
        input_files=tuple(input_files),
        output_files=tuple(output_files),
        vocab_file=path,
        do_lower_case=do_lower_case,
        options=options,
        random_seed=random_seed,
        dupe_factor=dupe_factor,
        input_encoding=input_encoding,
        chunk_bytes=chunk_bytes,
        num_verbose_examples=num_verbose_examples,
    )
    if flags is None:
        flags = _default_flags(config, input_file, vocab_file, tokenizer_file)
    if runner:
        beam_support.check_beam_installed(runner)
        from kbert.data.pretraining import beam_pipeline  # Imports apache_beam.

        return beam_pipeline.run_generation(
            config, vocab_size, flags, runner, pipeline_args, start, example_callback
        )
    return local_runner.run_generation(
        config, num_workers, vocab_size, flags, start, example_callback, progress_callback
    )
