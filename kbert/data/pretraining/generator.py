"""`create_pretraining_data`: raw text to pre-training TFRecords, in parallel.

Differences from google-research/bert's tool, which holds the corpus and all
`dupe_factor` copies in memory and runs in one process:

- Streaming. The input is read in file order and cut into chunks of about
  `chunk_bytes` of whole lines, each ending after a blank line where there
  is one (so documents stay whole). Each (dupe, chunk) task is tokenized,
  cut into instances and serialized by a worker; the parent writes the
  results in task order (all chunks of dupe 0, then of dupe 1, ...),
  round-robin over the output files. At most `2 * num_workers` task results
  are in flight, so memory is bounded by the chunk size, not by the corpus
  size or `dupe_factor`.
- Tokens cached on disk. With `dupe_factor > 1` a chunk's dupe-0 task saves
  its token ids (2 bytes each for vocabularies up to 65536 tokens: about the
  size of the text) in a temporary directory (`tempfile`, so `TMPDIR`), and
  the later dupes load them instead of reading and tokenizing again. Pool
  workers hand their records to the parent through files there too
  (`_process_in_pool`), grouped by output file (`ChunkResult`), and the
  parent appends each group to its output with one in-kernel copy
  (`OutputFile.copy_range`). The directory is removed at the end.
- Determinism. A task's randomness (numpy and `random.Random` generators)
  is seeded with `(random_seed, dupe index, chunk index)` only, and results
  are written in task order, so the output is byte-identical for any
  `num_workers`.
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

The steps of a run, in the order `create_pretraining_data` takes them:
check the arguments into a `GenerationConfig` (`_check_settings`,
`_output_files`, `_check_vocab`), plan the (dupe, chunk) tasks
(`_iter_tasks`), run them in this process or a pool (`_task_results`), write
the results in task order (`_write_results` into `_Outputs`), check the
totals (`check_totals`), then publish: sidecars, then renames
(`publish_outputs`, with the metadata of `run_summary`). The work on one chunk
is `ChunkProcessor.process` (`chunk_processor.py`), a plain method of an
object built from the config, which needs no pool: a pool worker holds one
in `_POOL_WORKER`.

`create_pretraining_data(..., runner=...)` runs the same tasks as an Apache
Beam pipeline instead (`beam_pipeline.py`, imported only then): it shares
`ChunkProcessor`, `Totals`, `check_totals`, `run_summary` and
`publish_outputs` with this module and writes the same files.

Workers are forked when this process has not run TensorFlow ops yet (the
command-line tool never does before starting them): they then share the
parent's imported TensorFlow instead of importing it again (seconds and
~800 MiB each). Otherwise they are spawned, because TensorFlow's runtime
thread pools, created when the first op runs, do not survive `fork`.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import ctypes
import dataclasses
import gc
import multiprocessing
import os
import posixpath
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Sequence

import tensorflow as tf

from kbert.data import beam_support
from kbert.data import text_files
from kbert.data.pretraining.chunk_processor import COUNT_KEYS
from kbert.data.pretraining.chunk_processor import DEFAULT_CHUNK_BYTES
from kbert.data.pretraining.chunk_processor import ChunkProcessor
from kbert.data.pretraining.chunk_processor import ChunkResult
from kbert.data.pretraining.chunk_processor import ChunkTask
from kbert.data.pretraining.chunk_processor import GenerationConfig
from kbert.data.pretraining.instances import InstanceOptions
from kbert.data.pretraining.instances import TrainingInstance
from kbert.data.pretraining.metadata import METADATA_FORMAT
from kbert.data.pretraining.metadata import write_metadata
from kbert.data.pretraining.output_file import OutputFile
from kbert.data.tokenization import PRETRAINING_PURPOSE
from kbert.data.vocabulary import PRETRAINING_TOKENS
from kbert.data.vocabulary import read_vocab
from kbert.data.vocabulary import vocab_sha256

# The sidecar's `runner` for runs of this module's own workers.
LOCAL_RUNNER = "local"


class _PoolWorker:
    """The per-process state of a pool worker: its `ChunkProcessor`.

    `multiprocessing.Pool` runs a module-level initializer once per worker
    and then module-level functions per task, so what the initializer builds
    has to live in the module; this one holder (`_POOL_WORKER`) is the only
    such slot. It stays empty in the parent process: with one worker, the
    caller keeps its `ChunkProcessor` in a local variable.
    """

    processor: ChunkProcessor | None = None


_POOL_WORKER = _PoolWorker()


def _init_pool_worker(config: GenerationConfig) -> None:
    """Pool initializer: tunes this worker process and builds its `ChunkProcessor`."""
    tune_worker_process()
    _POOL_WORKER.processor = ChunkProcessor(config)


def tune_worker_process() -> None:
    """Settings for a process that only runs tasks (a pool or Beam worker), one per core.

    TensorFlow gets one thread per pool: the workers already use every core,
    and TensorFlow's default pools (a thread per core each) would only
    contend for them. glibc keeps freed memory (`_keep_freed_memory`). Call
    it before the process runs TensorFlow ops; afterwards the thread
    settings can no longer change and are left as they are.
    """
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # TensorFlow's runtime already started in this process.
        pass
    _keep_freed_memory()


def _process_in_pool(task: ChunkTask) -> ChunkResult:
    """`ChunkProcessor.process` in a pool worker: the records go back through a temporary file.

    A pipe moves a task's ~25 MB of records in 64 KiB pieces, each a context
    switch between worker and parent; measured here that costs about 6 times
    the CPU of writing the same bytes to a file (page cache) for the parent to
    read.
    """
    result = _POOL_WORKER.processor.process(task)
    with open(task.records_file, "wb") as f:
        f.write(result.records)
    return dataclasses.replace(result, records=b"", records_file=task.records_file)


def _keep_freed_memory() -> None:
    """Has glibc keep freed memory for reuse in this (worker) process.

    Each task allocates and frees ~100 MB of numpy temporaries. By default
    glibc gives them back to the OS and the next task faults the pages in
    again: about a million page faults and 1.5 s of kernel time for 48 MB at
    dupe_factor 5. Keeping them costs no extra memory at peak (the same pages
    are reused). `mallopt` is glibc's documented interface; elsewhere this
    does nothing. Only pool workers call it: the caller's process keeps its
    own settings.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # From glibc's malloc.h.
    mallopt(m_mmap_threshold, 32 << 20)  # glibc's largest allowed value.
    mallopt(m_trim_threshold, 1 << 30)


def _iter_tasks(
    files: Sequence[str], dupe_factor: int, chunk_bytes: int, work_dir: str,
    cached_chunks: set[int], in_pool: bool,
) -> Iterator[ChunkTask]:
    """The (dupe, chunk) tasks in output order.

    Dupe 0 reads the input; its tasks save the chunk's tokens in `work_dir`
    when there are more dupes. A later dupe's task loads them once the
    caller has added the chunk to `cached_chunks` (its dupe-0 result was
    received, so the file is complete), else it reads the text again. With
    `in_pool`, each task's records go through a file in `work_dir`.
    """

    def records_file(dupe_index: int, chunk_index: int) -> str | None:
        return os.path.join(work_dir, f"records-{dupe_index}-{chunk_index}") if in_pool else None

    plan: list[list[text_files.TextPiece]] = []
    for chunk_index, pieces in enumerate(text_files.iter_text_chunks(files, chunk_bytes)):
        plan.append([piece.without_data() for piece in pieces])
        cache_file = os.path.join(work_dir, f"chunk-{chunk_index}.npz") if dupe_factor > 1 else None
        yield ChunkTask(0, chunk_index, pieces, cache_file, dupe_factor > 1, records_file(0, chunk_index))
    for dupe_index in range(1, dupe_factor):
        for chunk_index, pieces in enumerate(plan):
            records = records_file(dupe_index, chunk_index)
            if chunk_index in cached_chunks:
                cache_file = os.path.join(work_dir, f"chunk-{chunk_index}.npz")
                yield ChunkTask(dupe_index, chunk_index, None, cache_file, records_file=records)
            else:
                yield ChunkTask(dupe_index, chunk_index, pieces, records_file=records)


def worker_start_method() -> str:
    """`"fork"` while this process has not initialized TensorFlow's runtime, else `"spawn"`.

    Forked workers reuse the parent's imported modules; spawned ones import
    TensorFlow again. Forking is only safe before the eager context exists
    (its thread pools would be missing in the child), which TensorFlow does
    not expose publicly, hence the guarded private check.
    """
    if "fork" not in multiprocessing.get_all_start_methods():
        return "spawn"
    try:
        from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import

        ctx = context.context_safe()
        if ctx is None or getattr(ctx, "_context_handle", True) is None:
            return "fork"
    except Exception:  # pylint: disable=broad-except
        pass
    return "spawn"


def _bounded_imap(pool, func, tasks: Iterator, window: int) -> Iterator:
    """Ordered `pool.imap` that reads ahead at most `window` tasks.

    `Pool.imap` pulls its whole input at once, which would read the corpus
    into memory.
    """
    pending: collections.deque = collections.deque()
    for task in tasks:
        pending.append(pool.apply_async(func, (task,)))
        if len(pending) >= window:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()


@contextlib.contextmanager
def _task_results(
    config: GenerationConfig, tasks: Iterator[ChunkTask], num_workers: int
) -> Iterator[Iterator[ChunkResult]]:
    """Yields the results of `tasks` in task order: computed here for one worker, else by a pool.

    The pool is stopped when the block ends, also on error.
    """
    if num_workers == 1:
        processor = ChunkProcessor(config)
        yield map(processor.process, tasks)
        return
    start_method = worker_start_method()
    if start_method == "fork":
        # Keeps the collector from touching, and so copying, every
        # object inherited from this process in each worker.
        gc.freeze()
    pool = multiprocessing.get_context(start_method).Pool(
        num_workers, initializer=_init_pool_worker, initargs=(config,)
    )
    try:
        yield _bounded_imap(pool, _process_in_pool, tasks, window=2 * num_workers)
    finally:
        pool.terminate()
        pool.join()


class _Outputs:
    """The output files of a run: written as `<output>.incomplete`, renamed by `publish`.

    Used as a context manager: on leaving the block, the files are closed and,
    unless `publish` completed, every temporary file and sidecar is removed.

    The TFRecords are streamed (appended task by task, mostly by in-kernel
    range copies), so `kbert.files.write_text`, which takes a file's whole
    content, does not fit them; they keep this fixed temporary name, which
    readers skip like `kbert.files.temporary_name`'s (`list_data_files`).

    Args:
        paths: tuple of str. The output files.
    """

    def __init__(self, paths: Sequence[str]):
        self.paths = list(paths)
        self.temp_files = [path + ".incomplete" for path in paths]
        self.writers: list[OutputFile] = []
        self.instances_per_file = [0] * len(paths)
        self.published = False
        self._next_writer = 0  # Where the next task's first record goes.

    def __enter__(self) -> "_Outputs":
        try:
            for output, temp in zip(self.paths, self.temp_files):
                try:
                    self.writers.append(OutputFile(temp))
                except (tf.errors.OpError, OSError) as e:
                    raise ValueError(f"--output_file={output!r} cannot be written: {e}") from None
        except BaseException:
            self._discard()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self._discard()

    def write(self, result: ChunkResult) -> None:
        """Appends a task's records round-robin, continuing from the previous task.

        Group k of the result goes to `writers[(first + k) % len(writers)]`; a
        pool worker's records file is copied range by range (by the kernel
        where it can) and removed.
        """
        num_files, bounds, first = len(self.writers), result.group_bounds, self._next_writer
        source_fd = os.open(result.records_file, os.O_RDONLY) if result.records_file else None
        try:
            view = memoryview(result.records)
            for k in range(num_files):
                writer, size = self.writers[(first + k) % num_files], bounds[k + 1] - bounds[k]
                if size and source_fd is not None:
                    writer.copy_range(source_fd, bounds[k], size)
                elif size:
                    writer.write(view[bounds[k] : bounds[k + 1]])
                self.instances_per_file[(first + k) % num_files] += result.group_sizes[k]
        finally:
            if source_fd is not None:
                os.close(source_fd)
                os.remove(result.records_file)
        self._next_writer = (first + sum(result.group_sizes)) % num_files

    def close(self) -> None:
        """Closes the data files (a second call does nothing)."""
        for writer in self.writers:
            writer.close()

    def publish(self, metadata: dict[str, Any]) -> None:
        """Writes each file's sidecar, then renames the closed data files into place."""
        publish_outputs(self.paths, self.temp_files, self.instances_per_file, metadata)
        self.published = True

    def _discard(self) -> None:
        for writer in self.writers:
            try:
                writer.close()
            except Exception:  # pylint: disable=broad-except
                pass
        if not self.published:
            for temp in self.temp_files:
                if tf.io.gfile.exists(temp):
                    tf.io.gfile.remove(temp)


def publish_outputs(
    paths: Sequence[str], temp_files: Sequence[str], instances_per_file: Sequence[int],
    metadata: dict[str, Any],
) -> None:
    """Writes each output's sidecar, then renames its complete temporary file into place.

    Sidecars first: data that is in place always has its sidecar, so the
    trainer's checks never silently find none. On an error the sidecars of
    files not renamed yet are removed (the caller removes the temporary
    files).

    Args:
        paths: list of str. The output files.
        temp_files: list of str. Their complete data, under temporary names.
        instances_per_file: list of int. Records in each.
        metadata: dict. The run's metadata (`run_summary`); each sidecar adds
            `data_file` and `num_instances_in_file`.
    """
    sidecars: dict[str, str] = {}
    try:
        for output, num in zip(paths, instances_per_file):
            sidecars[output] = write_metadata(
                output, {**metadata, "data_file": output, "num_instances_in_file": num}
            )
        for output, temp in zip(paths, temp_files):
            tf.io.gfile.rename(temp, output, overwrite=True)
            del sidecars[output]  # In place with its data.
    except BaseException:
        for sidecar in sidecars.values():
            if tf.io.gfile.exists(sidecar):
                tf.io.gfile.remove(sidecar)
        raise


@dataclasses.dataclass
class Totals:
    """The running counts of a run: `counts` summed over tasks (documents of dupe 0 only), `line_counts` of dupe 0.

    Add each task's `ChunkResult` (or anything with its `dupe_index`,
    `counts` and `line_counts`) once, in any order.
    """

    counts: dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(COUNT_KEYS, 0))
    line_counts: dict[str, int] = dataclasses.field(
        default_factory=lambda: {"lines": 0, "truncated_lines": 0}
    )

    def add(self, result: ChunkResult) -> None:
        for key, value in result.counts.items():
            if key != "documents" or result.dupe_index == 0:
                self.counts[key] += value
        if result.dupe_index == 0:
            for key, value in result.line_counts.items():
                self.line_counts[key] += value


@dataclasses.dataclass
class _Callbacks:
    """The caller's callbacks and what they need between tasks."""

    start: float
    examples_left: int
    example_callback: Callable[[TrainingInstance], None] | None
    progress_callback: Callable[[dict[str, Any]], None] | None

    def report(self, result: ChunkResult, counts: dict[str, int]) -> None:
        """Passes on the first instances (until `examples_left` are shown) and the running counts."""
        if self.example_callback:
            for instance in result.examples[: self.examples_left]:
                self.example_callback(instance)
            self.examples_left -= min(self.examples_left, len(result.examples))
        if self.progress_callback:
            self.progress_callback(
                {
                    "dupe": result.dupe_index,
                    "chunk": result.chunk_index,
                    "seconds": time.time() - self.start,
                    **counts,
                }
            )


def _run_tasks(
    config: GenerationConfig, num_workers: int, outputs: _Outputs, callbacks: _Callbacks
) -> Totals:
    """Plans the tasks, runs them and writes their results in task order; returns the totals."""
    # Token caches and the records of pool workers.
    with tempfile.TemporaryDirectory(
        prefix="kbert-pretraining-data-", ignore_cleanup_errors=True
    ) as work_dir:
        # Chunks whose dupe-0 result is written, so their token cache is complete.
        cached_chunks: set[int] = set()
        tasks = _iter_tasks(
            config.input_files, config.dupe_factor, config.chunk_bytes, work_dir, cached_chunks,
            in_pool=num_workers > 1,
        )
        with _task_results(config, tasks, num_workers) as results:
            return _write_results(results, outputs, cached_chunks, callbacks)


def _write_results(
    results: Iterable[ChunkResult], outputs: _Outputs, cached_chunks: set[int], callbacks: _Callbacks
) -> Totals:
    """Writes each result as it arrives, tells `_iter_tasks` which token caches are complete."""
    totals = Totals()
    for result in results:
        outputs.write(result)
        totals.add(result)
        if result.dupe_index == 0:
            cached_chunks.add(result.chunk_index)
        callbacks.report(result, totals.counts)
    return totals


def check_totals(config: GenerationConfig, totals: Totals) -> None:
    input_files = ",".join(config.input_files)
    if totals.counts["documents"] == 0:
        raise ValueError(
            f"--input_file={input_files!r} holds no text (after "
            f"{config.input_encoding} decoding and tokenization): nothing to write."
        )
    if totals.counts["instances"] == 0:
        raise ValueError(
            f"--input_file={input_files!r} gave no instances: documents are "
            f"too short for --next_sentence={config.options.next_sentence}."
        )


def run_summary(
    config: GenerationConfig,
    vocab_size: int,
    flags: dict[str, Any],
    input_bytes: int,
    totals: Totals,
    seconds: float,
    runner: str = LOCAL_RUNNER,
) -> dict[str, Any]:
    """The metadata of a run, as the sidecars hold it (without the per-file keys).

    Args:
        config: `GenerationConfig`. The run's settings.
        vocab_size: int. Tokens in the vocabulary.
        flags: dict. The flag values to record.
        input_bytes: int. Size of the input files.
        totals: `Totals`. The run's counts.
        seconds: float. Wall time of the run.
        runner: str. What ran the tasks: `"local"` (this process or its
            pool) or the Apache Beam runner's name. Defaults to "local".

    Returns:
        The dict each sidecar holds, without `data_file` and
        `num_instances_in_file`.
    """
    options, counts = config.options, totals.counts
    return {
        "format": METADATA_FORMAT,
        "runner": runner,
        "max_seq_length": options.max_seq_length,
        "max_predictions_per_seq": options.max_predictions_per_seq,
        "next_sentence": options.next_sentence,
        "masking": options.masking,
        "do_lower_case": config.do_lower_case,
        "vocab_file": config.vocab_file,
        "vocab_sha256": vocab_sha256(config.vocab_file),
        "vocab_size": vocab_size,
        "input_files": list(config.input_files),
        "output_files": list(config.output_files),
        "chunk_bytes": config.chunk_bytes,
        "flags": flags,
        "counts": {
            "input_bytes": input_bytes,
            **totals.line_counts,
            **counts,
            "masked_fraction": counts["masked_tokens"] / max(1, counts["tokens"]),
            "random_next_fraction": (
                None
                if options.next_sentence == "none"
                else counts["random_next"] / max(1, counts["instances"])
            ),
        },
        "seconds": round(seconds, 3),
        "input_mb_per_s": round(input_bytes / 1e6 / max(seconds, 1e-9), 3),
    }


def _default_flags(config: GenerationConfig, input_file: str | Sequence[str]) -> dict[str, Any]:
    """The flags a sidecar records when the caller passes none: the arguments as given."""
    options = config.options
    return {
        "input_file": input_file if isinstance(input_file, str) else ",".join(input_file),
        "output_file": ",".join(config.output_files),
        "vocab_file": config.vocab_file,
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


def _check_vocab(vocab_file: str) -> list[str]:
    return read_vocab(vocab_file, PRETRAINING_TOKENS, PRETRAINING_PURPOSE)


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
    vocab_file: str,
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
        vocab_file: str. WordPiece `vocab.txt` with `[UNK]`, `[CLS]`,
            `[SEP]`, `[MASK]`.
        do_lower_case: bool. Lower case and strip accents. Defaults to True.
        do_whole_word_mask: bool. Mask whole words. Defaults to False.
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
            as a Beam pipeline (`kbert.data.pretraining.beam_pipeline`, needs
            `pip install kbert[beam]`): the same records, grouped the same
            way into the same files. Defaults to None.
        pipeline_args: list of str. Beam's own pipeline options with
            `runner`, such as `["--direct_num_workers=2",
            "--direct_running_mode=multi_processing"]`.

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
    vocab_size = len(_check_vocab(vocab_file))
    config = GenerationConfig(
        input_files=tuple(input_files),
        output_files=tuple(output_files),
        vocab_file=vocab_file,
        do_lower_case=do_lower_case,
        options=options,
        random_seed=random_seed,
        dupe_factor=dupe_factor,
        input_encoding=input_encoding,
        chunk_bytes=chunk_bytes,
        num_verbose_examples=num_verbose_examples,
    )
    if flags is None:
        flags = _default_flags(config, input_file)
    if runner:
        beam_support.check_beam_installed(runner)
        from kbert.data.pretraining import beam_pipeline  # Imports apache_beam.

        return beam_pipeline.run_generation(
            config, vocab_size, flags, runner, pipeline_args, start, example_callback
        )
    callbacks = _Callbacks(start, num_verbose_examples, example_callback, progress_callback)
    return _generate(config, num_workers, vocab_size, flags, callbacks)


def _generate(
    config: GenerationConfig,
    num_workers: int,
    vocab_size: int,
    flags: dict[str, Any],
    callbacks: _Callbacks,
) -> dict[str, Any]:
    """Runs the tasks, checks the totals and publishes the outputs with their sidecars."""
    input_bytes = sum(tf.io.gfile.stat(f).length for f in config.input_files)
    with _Outputs(config.output_files) as outputs:
        totals = _run_tasks(config, num_workers, outputs, callbacks)
        check_totals(config, totals)
        outputs.close()
        seconds = time.time() - callbacks.start
        metadata = run_summary(config, vocab_size, flags, input_bytes, totals, seconds)
        outputs.publish(metadata)
    return metadata
