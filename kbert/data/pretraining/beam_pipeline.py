"""`create_pretraining_data` as an Apache Beam pipeline: the same records, on many machines.

`create_pretraining_data(..., runner="DirectRunner")` (the tool's `--runner`)
runs the local tool's algorithm as a Beam pipeline, so one command runs on the
DirectRunner here and on Dataflow, Flink or Spark unchanged. For the same
inputs, flags and seed it writes the same files as the local tool, byte for
byte (the local tool's output does not depend on its workers either), with the
same sidecars plus `"runner"`.

The steps (each a named transform):

1. **Cut files into pieces** (a worker per file): `text_files.iter_text_pieces`
   reads each file through `tf.io.gfile` (`gs://` works) and cuts it where the
   local tool does; only the pieces' offsets travel on. Every piece is decoded
   once here, so a file that does not decode fails the run before any work,
   naming the file and line.
2. **Group pieces into chunks** (one step over the offsets of all files,
   `text_files.group_pieces`): the local tool's chunks, in its order, so each
   chunk's randomness (keyed by seed, dupe pass and chunk) and its
   random-next-sentence pool are the same.
3. **Make instances** (chunks spread over the workers): a `ChunkProcessor`
   per worker reads its chunk's bytes, tokenizes them in one call (the chunk
   is the batch; no per-line elements) and makes every dupe pass from those
   tokens (`ChunkProcessor.process_chunk`, so no token cache is shared). Each
   (dupe, chunk) task's framed records, grouped by output file as the local
   tool groups them, go to a part file in a work directory next to the first
   output; only the part's name, byte bounds and counts travel on. Memory
   per worker: one chunk's tokens and one task's records.
4. **Write output files** (a worker per output file): each task's first
   record goes to the file the local tool's round-robin gives it (from the
   record counts of the tasks before it), so every output file is the local
   tool's file: its groups appended in task order under a temporary name
   (`<output>.<run>-<attempt>.incomplete`, so a retried worker never shares
   one). Beam's `WriteToTFRecord` is not used because it neither keeps order
   nor takes records already framed in bulk.
5. **Publish** (one step): checks the totals (an empty corpus fails as
   locally), writes each sidecar, then renames the data files into place
   (`outputs.publish_outputs`).

The launching process removes the work directory at the end and, when the run
fails, every temporary file of this run: a failed run leaves nothing that
`pretraining_dataset` or `kbert-pretrain` would read (all temporary names end
in `.incomplete`, which `list_data_files` skips, also after a crash).
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Sequence

import apache_beam as beam
import numpy as np
import tensorflow as tf

from kbert.data import beam_support
from kbert.data import text_files
from kbert.data.pretraining.chunk_processor import ChunkProcessor
from kbert.data.pretraining.chunk_processor import GenerationConfig
from kbert.data.pretraining.instances import TrainingInstance
from kbert.data.pretraining.metadata import read_pretraining_metadata
from kbert.data.pretraining.outputs import Totals
from kbert.data.pretraining.outputs import check_totals
from kbert.data.pretraining.outputs import publish_outputs
from kbert.data.pretraining.outputs import run_summary
from kbert.data.pretraining.worker_process import tune_worker_process
from kbert.files import write_text

# Ranges of part files an output writer reads ahead (object stores answer each
# read after tens of milliseconds; a local disk does not care).
_READ_AHEAD = 8


@dataclasses.dataclass(frozen=True)
class _Run:
    """What the steps of one run share besides the config."""

    run_id: str
    work_dir: str
    vocab_size: int
    flags: dict[str, Any]
    runner: str
    input_bytes: int
    start: float
    tune_workers: bool


@dataclasses.dataclass(frozen=True)
class TaskOutput:
    """One (dupe, chunk) task's records, left in a part file, and its counts.

    Args:
        dupe_index: int. The task's pass.
        chunk_index: int. The task's chunk.
        part_file: str or None. The framed records grouped by output file;
            None when the task made no instance.
        group_bounds: list of int. Byte offsets of the groups in `part_file`.
        group_sizes: list of int. Records per group.
        counts: dict. The task's counts (`chunk_processor.COUNT_KEYS`).
        line_counts: dict. `lines` and `truncated_lines` (dupe 0 only).
    """

    dupe_index: int
    chunk_index: int
    part_file: str | None
    group_bounds: list[int]
    group_sizes: list[int]
    counts: dict[str, int]
    line_counts: dict[str, int]


def run_generation(
    config: GenerationConfig,
    vocab_size: int,
    flags: dict[str, Any],
    runner: str,
    pipeline_args: Sequence[str],
    start: float,
    example_callback: Callable[[TrainingInstance], None] | None = None,
) -> dict[str, Any]:
    """Runs `create_pretraining_data`'s checked config as a Beam pipeline and waits for it.

    Called by `create_pretraining_data(..., runner=...)`, which checks the
    arguments first.

    Args:
        config: `GenerationConfig`. The checked settings.
        vocab_size: int. Tokens in the vocabulary.
        flags: dict. Flag values for the sidecars.
        runner: str. Beam runner name.
        pipeline_args: list of str. Beam's own options.
        start: float. `time.time()` when the run began (for `seconds`).
        example_callback: callable or None. Called with the first
            `config.num_verbose_examples` instances in output order, read
            back from the written files.

    Returns:
        The metadata written to the sidecars (without the per-file keys).

    Raises:
        ValueError: bad input found by a worker (the message names the file
            and line), an empty corpus, or a failed run. Nothing is left
            behind then.

    Example:

    >>> kbert.data.create_pretraining_data("corpus/*.txt", "data/train.tfrecord", "vocab.txt",
    ...     runner="DirectRunner", pipeline_args=["--direct_num_workers=2",
    ...                                          "--direct_running_mode=multi_processing"])
    """
    options = beam_support.pipeline_options(runner, pipeline_args)
    run_id = uuid.uuid4().hex[:8]
    run = _Run(
        run_id=run_id,
        work_dir=f"{config.output_files[0]}.{run_id}.incomplete",
        vocab_size=vocab_size,
        flags=flags,
        runner=beam_support.runner_name(options),
        input_bytes=sum(tf.io.gfile.stat(f).length for f in config.input_files),
        start=start,
        tune_workers=not beam_support.runs_in_this_process(options),
    )
    published = False
    try:
        tf.io.gfile.makedirs(run.work_dir)
        pipeline = beam.Pipeline(options=options)
        _build_pipeline(pipeline, config, run)
        beam_support.run_pipeline(pipeline, ",".join(config.output_files))
        published = True
    finally:
        _remove_leftovers(config.output_files, run, published)
    metadata = read_pretraining_metadata(config.output_files[0])
    for key in ("data_file", "num_instances_in_file", "bytes_in_file", "sidecar"):
        metadata.pop(key, None)
    if example_callback and config.num_verbose_examples:
        for instance in first_instances(config, config.num_verbose_examples):
            example_callback(instance)
    return metadata


def _build_pipeline(pipeline: beam.Pipeline, config: GenerationConfig, run: _Run) -> None:
    """Adds the steps of the module docstring to `pipeline`."""
    tasks = (
        pipeline
        | "List input files" >> beam.Create(list(enumerate(config.input_files)))
        | "Cut files into pieces" >> beam.ParDo(_CutFile(config.chunk_bytes, config.input_encoding))
        | "Collect pieces" >> beam.combiners.ToList()
        | "Group pieces into chunks" >> beam.FlatMap(_plan_chunks, config.chunk_bytes)
        # The chunks come from one element; spread them over the workers.
        | "Spread chunks" >> beam.Reshuffle()
        | "Make instances" >> beam.ParDo(_MakeInstances(config, run.work_dir, run.tune_workers))
        | "Collect tasks" >> beam.combiners.ToList()
    )
    written = (
        pipeline
        | "List output files" >> beam.Create(list(range(len(config.output_files))))
        | "Spread output files" >> beam.Reshuffle()
        | "Write output files" >> beam.ParDo(
            _WriteOutputFile(config.output_files, run.run_id), beam.pvalue.AsSingleton(tasks)
        )
        | "Collect output files" >> beam.combiners.ToList()
    )
    _ = written | "Publish" >> beam.ParDo(_Publish(config, run), beam.pvalue.AsSingleton(tasks))


class _CutFile(beam.DoFn):
    """(file index, path) -> (file index, the file's pieces without data); checks the decoding."""

    def __init__(self, chunk_bytes: int, encoding: str):
        self.chunk_bytes = chunk_bytes
        self.encoding = encoding

    def process(self, element: tuple[int, str]) -> Iterator[tuple[int, list[text_files.TextPiece]]]:
        file_index, path = element
        pieces = []
        for piece in text_files.iter_text_pieces(path, self.chunk_bytes):
            text_files.decode_piece(piece, piece.data, self.encoding)  # Fails naming file:line.
            pieces.append(piece.without_data())
        yield file_index, pieces


def _plan_chunks(
    files: list[tuple[int, list[text_files.TextPiece]]], chunk_bytes: int
) -> Iterator[tuple[int, list[text_files.TextPiece]]]:
    """The pieces of all files, in file order, grouped into the local tool's chunks."""
    pieces = (piece for _, file_pieces in sorted(files, key=lambda f: f[0]) for piece in file_pieces)
    yield from enumerate(text_files.group_pieces(pieces, chunk_bytes))


class _MakeInstances(beam.DoFn):
    """(chunk index, pieces) -> a `TaskOutput` per dupe pass; the records go to part files."""

    def __init__(self, config: GenerationConfig, work_dir: str, tune_worker: bool):
        self.config = config
        self.work_dir = work_dir
        self.tune_worker = tune_worker
        self.processor: ChunkProcessor | None = None

    def setup(self) -> None:
        if self.tune_worker:
            tune_worker_process()
        self.processor = ChunkProcessor(self.config)

    def process(self, element: tuple[int, list[text_files.TextPiece]]) -> Iterator[TaskOutput]:
        chunk_index, pieces = element
        for result in self.processor.process_chunk(chunk_index, pieces, range(self.config.dupe_factor)):
            part_file = None
            if result.records:
                part_file = os.path.join(self.work_dir, f"part-{result.dupe_index}-{chunk_index}")
                # Temporary name, then rename: a retried bundle rewrites the same bytes safely.
                write_text(part_file, result.records)
            yield TaskOutput(
                result.dupe_index, chunk_index, part_file, result.group_bounds, result.group_sizes,
                result.counts, result.line_counts,
            )


def output_ranges(
    tasks: Sequence[TaskOutput], file_index: int, num_files: int
) -> tuple[list[tuple[str, int, int]], int]:
    """The `(part file, offset, size)` ranges that make output file `file_index`, and its records.

    The local tool sends group k of a task to file `(first + k) % num_files`,
    where `first` continues the round-robin from the tasks before it (in task
    order: all chunks of dupe 0, then of dupe 1, ...).

    Args:
        tasks: list of `TaskOutput`. Every task of the run, in any order.
        file_index: int. Which output file.
        num_files: int. How many output files.

    Returns:
        The ranges in task order, and the number of records they hold.
    """
    ranges, num_records, first = [], 0, 0
    for task in sorted(tasks, key=lambda t: (t.dupe_index, t.chunk_index)):
        group = (file_index - first) % num_files
        size = task.group_bounds[group + 1] - task.group_bounds[group]
        if size:
            ranges.append((task.part_file, task.group_bounds[group], size))
            num_records += task.group_sizes[group]
        first = (first + sum(task.group_sizes)) % num_files
    return ranges, num_records


def _read_ranges(ranges: Sequence[tuple[str, int, int]]) -> Iterator[bytes]:
    """The bytes of each range in order, read a few ranges ahead by threads."""

    def read(part_file: str, offset: int, size: int) -> bytes:
        with tf.io.gfile.GFile(part_file, "rb") as f:
            f.seek(offset)
            return f.read(size)

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as executor:
        pending: collections.deque = collections.deque()
        for part_file, offset, size in ranges:
            pending.append(executor.submit(read, part_file, offset, size))
            if len(pending) >= _READ_AHEAD:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


class _WriteOutputFile(beam.DoFn):
    """file index -> (file index, temporary file, records): writes one output file under a temporary name."""

    def __init__(self, output_files: Sequence[str], run_id: str):
        self.output_files = list(output_files)
        self.run_id = run_id

    def process(self, file_index: int, tasks: list[TaskOutput]) -> Iterator[tuple[int, str, int]]:
        output = self.output_files[file_index]
        ranges, num_records = output_ranges(tasks, file_index, len(self.output_files))
        # Unique per attempt: a retried or speculative worker never writes into another's file.
        temp = f"{output}.{self.run_id}-{uuid.uuid4().hex[:8]}.incomplete"
        with tf.io.gfile.GFile(temp, "wb") as f:
            for data in _read_ranges(ranges):
                f.write(data)
        yield file_index, temp, num_records


class _Publish(beam.DoFn):
    """The written files -> checks the totals, writes the sidecars, renames the files into place."""

    def __init__(self, config: GenerationConfig, run: _Run):
        self.config = config
        self.run = run

    def process(self, written: list[tuple[int, str, int]], tasks: list[TaskOutput]) -> Iterator[None]:
        totals = Totals()
        for task in tasks:
            totals.add(task)
        check_totals(self.config, totals)
        written = sorted(written)
        run = self.run
        metadata = run_summary(
            self.config, run.vocab_size, run.flags, run.input_bytes, totals,
            time.time() - run.start, run.runner,
        )
        publish_outputs(
            self.config.output_files, [temp for _, temp, _ in written],
            [num for _, _, num in written], metadata,
        )
        yield from ()


def _remove_leftovers(output_files: Sequence[str], run: _Run, published: bool) -> None:
    """Removes the work directory and, unless published, every temporary output of the run."""
    if tf.io.gfile.exists(run.work_dir):
        tf.io.gfile.rmtree(run.work_dir)
    if published:
        return
    for output in output_files:
        for temp in tf.io.gfile.glob(f"{output}.{run.run_id}-*.incomplete"):
            tf.io.gfile.remove(temp)


def first_instances(config: GenerationConfig, count: int) -> list[TrainingInstance]:
    """The first `count` instances in output order, read back from the written files.

    Record i of the run is record `i // n` of output file `i % n` (round-robin
    from the first file), so the files' first records interleaved are the
    instances the local tool passes to `example_callback`.

    Args:
        config: `GenerationConfig`. Its output files are complete.
        count: int. How many.

    Returns:
        The instances (tokens, segments, masked positions and labels, label).
    """
    num_files = len(config.output_files)
    per_file = [
        [r.numpy() for r in tf.data.TFRecordDataset(path).take(-(-count // num_files))]
        for path in config.output_files
    ]
    records = [per_file[i % num_files][i // num_files] for i in range(count)
               if i // num_files < len(per_file[i % num_files])]
    return [_instance_from_record(r, config.options.next_sentence != "none") for r in records]


def _instance_from_record(record: bytes, next_sentence: bool) -> TrainingInstance:
    features = tf.train.Example.FromString(record).features.feature
    mask = np.array(features["input_mask"].int64_list.value)
    length = int(mask.sum())
    weights = np.array(features["masked_lm_weights"].float_list.value)
    num_masked = int((weights > 0).sum())
    label = bool(features["next_sentence_labels"].int64_list.value[0]) if next_sentence else None
    return TrainingInstance(
        list(features["input_ids"].int64_list.value[:length]),
        list(features["segment_ids"].int64_list.value[:length]),
        list(features["masked_lm_positions"].int64_list.value[:num_masked]),
        list(features["masked_lm_ids"].int64_list.value[:num_masked]),
        label,
    )
