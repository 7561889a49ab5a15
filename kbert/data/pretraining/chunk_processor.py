"""The work on one chunk of the corpus: tokenize, cut into instances, mask, serialize.

`create_pretraining_data` cuts its input into chunks of about `chunk_bytes` of
whole lines and makes one task per (dupe, chunk). `ChunkProcessor.process`
turns a `ChunkTask` into a `ChunkResult`: the task's framed TFRecords, grouped
by output file, with its counts. It depends only on the `GenerationConfig` and
the task:

- Determinism. A task's randomness (numpy and `random.Random` generators)
  is seeded with `(random_seed, dupe index, chunk index)` only (`task_rng`,
  `task_numpy_rng`), so any runner (this process, a pool worker, an Apache
  Beam `DoFn`) gives the same bytes for the same task.
- Bounded pools. Random-next segments are drawn and instances shuffled
  within the chunk, where google-research/bert does both over the whole
  corpus (see `kbert.data.pretraining.generator`).
- Token cache. A dupe-0 task can save the chunk's token ids (2 bytes each for
  vocabularies up to 65536 tokens) in `cache_file`, and a later dupe's task
  load them instead of reading and tokenizing the text again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Iterator
from typing import NamedTuple
from typing import Sequence

import numpy as np

from kbert.data import text_files
from kbert.data.pretraining.instances import InstanceOptions
from kbert.data.pretraining.instances import TrainingInstance
from kbert.data.pretraining.instances import VocabInfo
from kbert.data.pretraining.instances import cut_layouts
from kbert.data.pretraining.instances import instance_from_layout
from kbert.data.pretraining.instances import layouts_to_arrays
from kbert.data.pretraining.instances import mask_tokens_batch
from kbert.data.pretraining.tf_example import ExampleEncoder
from kbert.data.pretraining.tfrecord_framing import frame_records
from kbert.data.tokenization import pretraining_tokenizer

DEFAULT_CHUNK_BYTES = 1 << 20
# The counts of a task (`ChunkResult.counts`), summed over a run.
COUNT_KEYS = (
    "documents",
    "segments",
    "instances",
    "tokens",
    "masked_tokens",
    "random_next",
)


@dataclasses.dataclass(frozen=True)
class GenerationConfig:
    """The checked settings of one run: everything its output depends on.

    `create_pretraining_data` builds one from its arguments and passes it to
    each step; a `ChunkProcessor` needs nothing else. The number of workers
    is not here because the output does not depend on it.

    Args:
        input_files: tuple of str. The text files, in reading order.
        output_files: tuple of str. The TFRecord files, filled round-robin.
        vocab_file: str. The tokenizer file: a WordPiece `vocab.txt` or a
            byte-level BPE `tokenizer.json` (its kind by its extension).
        do_lower_case: bool. Lower case and strip accents (WordPiece; a
            byte-level BPE has no lower casing). Defaults to True.
        options: `InstanceOptions`. How instances are cut and masked.
            Defaults to `InstanceOptions()`.
        random_seed: int. Seeds every task's generators. Defaults to 12345.
        dupe_factor: int. Passes over the input. Defaults to 10.
        input_encoding: str. Codec of the input. Defaults to "utf-8".
        chunk_bytes: int. Text per task. Defaults to 1 MiB.
        num_verbose_examples: int. How many first instances of each task
            come back as `TrainingInstance`s. Defaults to 0.

    Example:

    >>> config = GenerationConfig(("corpus.txt",), ("train.tfrecord",), "vocab.txt",
    ...                           options=InstanceOptions(max_seq_length=64))
    """

    input_files: tuple[str, ...]
    output_files: tuple[str, ...]
    vocab_file: str
    do_lower_case: bool = True
    options: InstanceOptions = InstanceOptions()
    random_seed: int = 12345
    dupe_factor: int = 10
    input_encoding: str = "utf-8"
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    num_verbose_examples: int = 0


@dataclasses.dataclass
class ChunkTask:
    """One (dupe, chunk) unit of work, as `_iter_tasks` plans it.

    Args:
        dupe_index: int. Which pass over the input.
        chunk_index: int. Which chunk of the input, in reading order.
        pieces: list of `text_files.TextPiece` or None. The chunk's text
            (`data` held or read on demand), or None when the chunk's tokens
            are in `cache_file` (written by its dupe-0 task).
        cache_file: str or None. Where the chunk's tokens are (or go).
        write_cache: bool. Save the tokens in `cache_file`. Defaults to False.
        records_file: str or None. Where a pool worker leaves the task's
            records (see `_process_in_pool`).
    """

    dupe_index: int
    chunk_index: int
    pieces: list[text_files.TextPiece] | None
    cache_file: str | None = None
    write_cache: bool = False
    records_file: str | None = None


@dataclasses.dataclass
class ChunkResult:
    """What `ChunkProcessor.process` makes of a task.

    Args:
        dupe_index: int. The task's.
        chunk_index: int. The task's.
        records: bytes. The framed TFRecords grouped by output file (see
            `_file_groups`): group k is `records[group_bounds[k]:group_bounds[k + 1]]`,
            `group_sizes[k]` records. Empty when a pool worker left them in
            `records_file`.
        group_bounds: list of int. `len(output_files) + 1` byte offsets.
        group_sizes: list of int. Records per group.
        counts: dict. The task's counts (`COUNT_KEYS`).
        examples: list of `TrainingInstance`. The first
            `num_verbose_examples` instances in output order.
        line_counts: dict. `lines` and `truncated_lines` read (zero when the
            tokens came from the cache).
        records_file: str or None. Holds `records` instead (pool workers).
    """

    dupe_index: int
    chunk_index: int
    records: bytes
    group_bounds: list[int]
    group_sizes: list[int]
    counts: dict[str, int]
    examples: list[TrainingInstance]
    line_counts: dict[str, int]
    records_file: str | None = None


class _Batch(NamedTuple):
    """The masked instances of a task as arrays, in `ExampleEncoder.encode_batch`'s argument order."""

    token_ids: np.ndarray
    lengths: np.ndarray
    segment_ids: np.ndarray
    masked_lm_positions: np.ndarray
    masked_lm_ids: np.ndarray
    num_masked: np.ndarray
    next_sentence_labels: np.ndarray | None


class ChunkProcessor:
    """Turns one (dupe, chunk) task into TFRecords: tokenize, cut, mask, serialize.

    The work depends only on the config and the task: the task's random
    generators are keyed by `(random_seed, dupe_index, chunk_index)`
    (`task_rng`, `task_numpy_rng`), so a pool worker, this process or any
    other runner (an Apache Beam `DoFn` that builds one in `setup`) gives the
    same bytes for the same task.

    Args:
        config: `GenerationConfig`. Its tokenizer is loaded here.

    Example:

    >>> processor = ChunkProcessor(config)
    >>> for chunk_index, pieces in enumerate(text_files.iter_text_chunks(
    ...         config.input_files, config.chunk_bytes)):
    ...     result = processor.process(ChunkTask(0, chunk_index, pieces))
    """

    def __init__(self, config: GenerationConfig):
        self.config = config
        options = config.options
        self.tokenizer = pretraining_tokenizer(config.vocab_file, config.do_lower_case)
        self.vocab = VocabInfo.from_file(config.vocab_file)
        self.encoder = ExampleEncoder(
            options.max_seq_length,
            options.max_predictions_per_seq,
            self.tokenizer.vocab_size,
            next_sentence=options.next_sentence != "none",
            masked_lm=options.masking == "static",
        )

    def process(self, task: ChunkTask) -> ChunkResult:
        """Returns the task's records (grouped by output file), counts and first instances."""
        flat, segments, line_counts = self._tokens(task)
        return self._process_tokens(task, flat, segments, line_counts)

    def process_chunk(
        self, chunk_index: int, pieces: list[text_files.TextPiece], dupe_indices: Sequence[int]
    ) -> Iterator[ChunkResult]:
        """Tokenizes a chunk once and yields the result of each of its (dupe, chunk) tasks.

        What a runner without a shared token cache does (an Apache Beam
        worker): the same results as `process` on each
        `ChunkTask(dupe_index, chunk_index, pieces)`, one at a time.
        `line_counts` are those read, in the result of dupe 0 only (as from
        `process`, whose later dupes load cached tokens).

        Args:
            chunk_index: int. Which chunk of the input.
            pieces: list of `text_files.TextPiece`. Its text (held or read
                on demand).
            dupe_indices: sequence of int. The passes to make.

        Yields:
            A `ChunkResult` per dupe index, in the given order.

        Example:

        >>> for result in processor.process_chunk(0, pieces, range(config.dupe_factor)):
        ...     print(result.dupe_index, result.counts["instances"])
        """
        flat, segments, line_counts = self._tokenize(pieces)
        no_lines = dict.fromkeys(line_counts, 0)
        for dupe_index in dupe_indices:
            task = ChunkTask(dupe_index, chunk_index, None)
            yield self._process_tokens(task, flat, segments, line_counts if dupe_index == 0 else no_lines)

    def _process_tokens(
        self, task: ChunkTask, flat: np.ndarray, segments: np.ndarray, line_counts: dict[str, int]
    ) -> ChunkResult:
        """Cuts, masks and serializes the instances of one task from the chunk's tokens."""
        bounds, starts = _document_bounds(segments)
        key = (self.config.random_seed, task.dupe_index, task.chunk_index)
        rng, np_rng = task_rng(*key), task_numpy_rng(*key)
        layouts = cut_layouts(bounds, starts, self.config.options, np_rng)
        counts = dict.fromkeys(COUNT_KEYS, 0)
        counts["documents"] = len(starts) - 1
        counts["segments"] = len(segments)
        num_files = len(self.config.output_files)
        if not len(layouts):
            return ChunkResult(
                task.dupe_index, task.chunk_index, b"", [0] * (num_files + 1), [0] * num_files,
                counts, [], line_counts,
            )
        # The original shuffles all instances (numpy's permutation: `random.shuffle`
        # is a Python loop).
        layouts = layouts[np_rng.permutation(len(layouts))]
        batch = self._mask(flat, layouts, rng, np_rng)
        counts["instances"] = len(layouts)
        counts["tokens"] = int(batch.lengths.sum())
        counts["masked_tokens"] = int(batch.num_masked.sum())
        labels = batch.next_sentence_labels
        counts["random_next"] = int(labels.sum()) if labels is not None else 0
        order, group_sizes = _file_groups(len(layouts), num_files)
        grouped = batch if order is None else _Batch(*(None if c is None else c[order] for c in batch))
        records, offsets = frame_records(*self.encoder.encode_batch(*grouped))
        group_bounds = offsets[np.cumsum([0, *group_sizes])].tolist()
        return ChunkResult(
            task.dupe_index, task.chunk_index, records, group_bounds, group_sizes, counts,
            _first_instances(batch, self.config.num_verbose_examples), line_counts,
        )

    def _tokens(self, task: ChunkTask) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
        """The chunk's `(flat ids, segments, line counts)`: from the cache, or tokenized (and cached)."""
        if task.pieces is None:
            flat, segments = _load_tokens(task.cache_file)
            return flat, segments, {"lines": 0, "truncated_lines": 0}
        flat, segments, line_counts = self._tokenize(task.pieces)
        if task.write_cache:
            _save_tokens(task.cache_file, flat, segments, self.tokenizer.vocab_size)
        return flat, segments, line_counts

    def _tokenize(
        self, pieces: list[text_files.TextPiece]
    ) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
        """Tokenizes a chunk: `(flat ids, segments [S, 3] of (begin, end, document), line counts)`.

        Segments are the non-blank lines with tokens; a blank line and every
        piece boundary end a document; documents are numbered in order.
        """
        texts, piece_starts, line = [], [], 0
        for piece in pieces:
            data = text_files.decode_piece(piece, piece.read(), self.config.input_encoding)
            if data and not data.endswith(b"\n"):
                data += b"\n"
            texts.append(data)
            piece_starts.append(line)
            line += data.count(b"\n")
        tokenized = self.tokenizer.tokenize_text(b"".join(texts))
        splits, blank = tokenized.row_splits, tokenized.blank
        new_document = blank.copy()
        new_document[[s for s in piece_starts if s < len(blank)]] = True
        document = np.cumsum(new_document)
        keep = np.nonzero(~blank & (splits[1:] > splits[:-1]))[0]
        segments = np.stack([splits[keep], splits[keep + 1], document[keep]], axis=1)
        line_counts = {"lines": int((~blank).sum()), "truncated_lines": tokenized.num_truncated}
        return tokenized.flat_ids, segments, line_counts

    def _mask(
        self, flat: np.ndarray, layouts: np.ndarray, rng: random.Random, np_rng: np.random.Generator
    ) -> _Batch:
        """Builds and masks the instances of `layouts` (rows in output order).

        Whole-word and n-gram masking go instance by instance with `rng`;
        plain token masking is vectorized with `np_rng`. With
        `masking="dynamic"` nothing is masked (the reader masks each batch).
        """
        options, vocab = self.config.options, self.vocab
        next_labels = layouts[:, 4] if options.next_sentence != "none" else None
        if options.masking == "dynamic":
            token_ids, segment_ids, lengths = layouts_to_arrays(flat, layouts, options, vocab)
            none = np.zeros((len(layouts), 0), np.int64)
            return _Batch(token_ids, lengths, segment_ids, none, none,
                          np.zeros(len(layouts), np.int64), next_labels)
        if not (options.do_whole_word_mask or options.max_ngram_size > 1):
            token_ids, segment_ids, lengths = layouts_to_arrays(flat, layouts, options, vocab)
            masked_ids, positions, labels, num_masked = mask_tokens_batch(
                token_ids, lengths, options, vocab, np_rng
            )
            return _Batch(masked_ids, lengths, segment_ids, positions, labels, num_masked, next_labels)
        flat_list = flat.tolist()
        instances = [
            instance_from_layout(flat_list, x, options, vocab, rng) for x in layouts.tolist()
        ]
        s, p = options.max_seq_length, options.max_predictions_per_seq
        return _Batch(
            token_ids=_pad([x.token_ids for x in instances], s),
            lengths=np.array([len(x.token_ids) for x in instances], np.int64),
            segment_ids=_pad([x.segment_ids for x in instances], s),
            masked_lm_positions=_pad([x.masked_lm_positions for x in instances], p),
            masked_lm_ids=_pad([x.masked_lm_ids for x in instances], p),
            num_masked=np.array([len(x.masked_lm_positions) for x in instances], np.int64),
            next_sentence_labels=next_labels,
        )


def _first_instances(batch: _Batch, count: int) -> list[TrainingInstance]:
    """The first `count` rows of `batch` as `TrainingInstance`s (for `--verbose`)."""
    examples, labels = [], batch.next_sentence_labels
    for i in range(min(count, len(batch.lengths))):
        n, k = int(batch.lengths[i]), int(batch.num_masked[i])
        examples.append(
            TrainingInstance(
                batch.token_ids[i, :n].tolist(),
                batch.segment_ids[i, :n].tolist(),
                batch.masked_lm_positions[i, :k].tolist(),
                batch.masked_lm_ids[i, :k].tolist(),
                bool(labels[i]) if labels is not None else None,
            )
        )
    return examples


def _task_key(random_seed: int, dupe_index: int, chunk_index: int) -> str:
    return f"kbert.pretraining:{random_seed}:{dupe_index}:{chunk_index}"


def task_rng(random_seed: int, dupe_index: int, chunk_index: int) -> random.Random:
    """The random generator of one (dupe, chunk) task; independent of workers."""
    # A str seed is hashed with sha512 by `random.Random`: stable across
    # processes and Python runs, unlike `hash()`.
    return random.Random(_task_key(random_seed, dupe_index, chunk_index))


def task_numpy_rng(random_seed: int, dupe_index: int, chunk_index: int) -> np.random.Generator:
    """The numpy generator (shuffles, vectorized masking) of one task; independent of workers."""
    digest = hashlib.sha256(_task_key(random_seed, dupe_index, chunk_index).encode()).digest()
    return np.random.default_rng(np.frombuffer(digest, np.uint32))


def _document_bounds(segments: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Segments from `ChunkProcessor._tokenize` as `cut_layouts`'s `(bounds, starts)`.

    A document's segments are consecutive in the flat ids, so its boundaries
    are its first segment's begin followed by every segment's end.
    """
    num_segments = len(segments)
    new_document = np.ones(num_segments, bool)
    new_document[1:] = segments[1:, 2] != segments[:-1, 2]
    firsts = np.nonzero(new_document)[0]  # Each document's first segment.
    rank = np.cumsum(new_document) - 1  # Each segment's document.
    bounds = np.empty(num_segments + len(firsts), np.int64)
    bounds[np.arange(num_segments) + rank + 1] = segments[:, 1]
    starts = np.append(firsts + np.arange(len(firsts)), len(bounds))
    bounds[starts[:-1]] = segments[firsts, 0]
    return bounds, starts


def _save_tokens(path: str, flat: np.ndarray, segments: np.ndarray, vocab_size: int) -> None:
    dtype = np.uint16 if vocab_size <= 1 << 16 else np.int32
    with open(path, "wb") as f:
        np.savez(f, flat=flat.astype(dtype), segments=segments.astype(np.int64))


def _load_tokens(path: str) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path) as cached:
        return cached["flat"].astype(np.int64), cached["segments"]


def _pad(rows: list[list[int]], width: int) -> np.ndarray:
    out = np.zeros((len(rows), width), np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def _file_groups(num_records: int, num_files: int) -> tuple[np.ndarray | None, list[int]]:
    """Row order that groups a task's records by output file, and the group sizes.

    Instances go round-robin over the output files, so group k holds records
    k, k + num_files, k + 2 * num_files, ... in order. The parent sends group
    k to file `(first + k) % num_files`, where `first` is the file the task's
    first record goes to: each file gets its records as one contiguous range.
    Returns `(None, [num_records])` for one file (no reordering).
    """
    sizes = [len(range(k, num_records, num_files)) for k in range(num_files)]
    if num_files == 1:
        return None, sizes
    return np.concatenate([np.arange(k, num_records, num_files) for k in range(num_files)]), sizes
